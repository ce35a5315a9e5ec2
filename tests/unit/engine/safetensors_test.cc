#include "engine/safetensors.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessera {
namespace {

namespace fs = std::filesystem;

// Whole file bytes: u64 LE header length (len_override if given), header, and
// data_bytes bytes of data (value = index & 0xff).
std::string Raw(const std::string& header, size_t data_bytes, uint64_t len_override = UINT64_MAX) {
  const uint64_t n = len_override == UINT64_MAX ? header.size() : len_override;
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  s += header;
  for (size_t i = 0; i < data_bytes; ++i) s += static_cast<char>(i & 0xff);
  return s;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "/safetensors_test_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  void Put(const std::string& name, const std::string& bytes) const {
    std::ofstream out(Path(name), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good());
  }
  // A valid file with the named F32 tensors of shape [2] (8 bytes each).
  void PutShard(const std::string& name, const std::vector<std::string>& tensors) const {
    std::vector<SafetensorsTensorToWrite> w;
    for (const auto& t : tensors) {
      w.push_back({t, DType::kF32, {2}, [](uint8_t* dst) { std::memset(dst, 1, 8); }});
    }
    ASSERT_TRUE(WriteSafetensors(Path(name), w, {}).ok());
  }

  std::string dir_;
};

void ExpectError(const Status& st, StatusCode code, const std::vector<std::string>& needles) {
  EXPECT_EQ(st.code(), code) << st.ToString();
  for (const auto& n : needles)
    EXPECT_NE(st.message().find(n), std::string::npos) << "'" << n << "' not in: " << st.message();
}

TEST_F(SafetensorsTest, RoundTripF32F16Bf16WithMetadata) {
  std::vector<float> a = {1.5f, -2.25f, 3.0f, 0.0f, 1e-3f, 65504.0f};
  std::vector<uint16_t> h, b;
  for (float v : a) h.push_back(F32ToF16(v)), b.push_back(F32ToBf16(v));
  std::vector<int32_t> ids = {7, -8, 9};
  std::vector<SafetensorsTensorToWrite> w = {
      {"z.f32", DType::kF32, {2, 3}, [&](uint8_t* d) { std::memcpy(d, a.data(), 24); }},
      {"a.f16", DType::kF16, {3, 2}, [&](uint8_t* d) { std::memcpy(d, h.data(), 12); }},
      {"m.bf16", DType::kBF16, {6}, [&](uint8_t* d) { std::memcpy(d, b.data(), 12); }},
      {"ids", DType::kI32, {3}, [&](uint8_t* d) { std::memcpy(d, ids.data(), 12); }},
      {"empty", DType::kF32, {0, 4}, [](uint8_t*) { FAIL() << "no fill for empty tensors"; }},
      {"scalar",
       DType::kF32,
       {},
       [](uint8_t* d) {
         float one = 1;
         std::memcpy(d, &one, 4);
       }},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "q\"uote\n"}};
  const std::string path = Path("model.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, w, meta).ok());

  const std::string bytes = Slurp(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 24 + 12 + 12 + 12 + 4);
  EXPECT_EQ(bytes[8], '{');

  auto f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->path(), path);
  EXPECT_EQ((*f)->metadata(), meta);
  EXPECT_EQ((*f)->file_bytes(), bytes.size());
  ASSERT_EQ((*f)->tensors().size(), 6u);
  // Laid out sorted by name: a.f16, empty, ids, m.bf16, scalar, z.f32.
  EXPECT_EQ((*f)->Find("a.f16")->begin, 0u);
  EXPECT_EQ((*f)->Find("ids")->begin, 12u);
  EXPECT_EQ((*f)->Find("z.f32")->end, 64u);

  const SafetensorsTensor* tf = (*f)->Find("z.f32");
  ASSERT_NE(tf, nullptr);
  EXPECT_EQ(tf->dtype_name, "F32");
  EXPECT_EQ(tf->dtype, DType::kF32);
  EXPECT_EQ(tf->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(tf->numel(), 6);
  EXPECT_EQ(tf->file, path);
  EXPECT_EQ(std::memcmp(tf->data, a.data(), 24), 0);
  const SafetensorsTensor* th = (*f)->Find("a.f16");
  EXPECT_EQ(th->dtype, DType::kF16);
  EXPECT_EQ(std::memcmp(th->data, h.data(), 12), 0);
  const SafetensorsTensor* tb = (*f)->Find("m.bf16");
  EXPECT_EQ(tb->dtype, DType::kBF16);
  EXPECT_EQ(std::memcmp(tb->data, b.data(), 12), 0);
  for (int i = 0; i < 6; ++i) {
    uint16_t v;
    std::memcpy(&v, tb->data + 2 * i, 2);
    EXPECT_EQ(Bf16ToF32(v), Bf16ToF32(F32ToBf16(a[i])));
  }
  EXPECT_EQ(std::memcmp((*f)->Find("ids")->data, ids.data(), 12), 0);
  EXPECT_EQ((*f)->Find("ids")->dtype, DType::kI32);
  EXPECT_EQ((*f)->Find("empty")->nbytes(), 0u);
  EXPECT_EQ((*f)->Find("empty")->numel(), 0);
  EXPECT_EQ((*f)->Find("scalar")->numel(), 1);
  EXPECT_EQ((*f)->Find("missing"), nullptr);
  // The data pointers index the mapped file.
  EXPECT_EQ(std::memcmp(tf->data, bytes.data() + 8 + n + tf->begin, 24), 0);

  auto ws = WeightStore::Open(dir_);
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  EXPECT_EQ((*ws)->total_bytes(), static_cast<int64_t>(bytes.size()));
  EXPECT_EQ((*ws)->Names(), (std::vector<std::string>{"a.f16", "empty", "ids", "m.bf16", "scalar", "z.f32"}));
  auto r = (*ws)->Require("z.f32", {2, 3});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, (*ws)->Find("z.f32"));
  EXPECT_TRUE((*ws)->Require("scalar", {}).ok());
}

TEST_F(SafetensorsTest, ParseHeaderDirectly) {
  const std::string f = Raw(
      R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6],"extra":{"x":[1,{}]}},)"
      R"("a":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[0,4]},)"
      R"("e":{"dtype":"F64","shape":[0],"data_offsets":[6,6]}})",
      6);
  auto h = ParseSafetensorsHeader(reinterpret_cast<const uint8_t*>(f.data()), f.size(), "mem");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->tensors.size(), 3u);
  EXPECT_EQ(h->tensors[0].name, "a");  // ordered by offset
  EXPECT_FALSE(h->tensors[0].dtype.has_value());
  EXPECT_EQ(h->tensors[1].name, "b");
  EXPECT_EQ(h->tensors[1].file, "mem");
  EXPECT_EQ(h->data_offset, 8 + h->header_bytes);
  EXPECT_EQ(h->data_bytes, 6u);
  EXPECT_EQ(h->tensors[1].data, reinterpret_cast<const uint8_t*>(f.data()) + h->data_offset + 4);
  EXPECT_EQ(SafetensorsDTypeSize("BF16"), 2);
  EXPECT_EQ(SafetensorsDTypeSize("U64"), 8);
  EXPECT_EQ(SafetensorsDTypeSize("bf16"), 0);

  const std::string empty = Raw("{}", 0);
  auto e = ParseSafetensorsHeader(reinterpret_cast<const uint8_t*>(empty.data()), empty.size(), "mem");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE(e->tensors.empty());
}

struct BadCase {
  const char* what;
  std::string bytes;
  StatusCode code;
  std::vector<std::string> needles;  // besides the file name
};

std::string T(const std::string& name, const std::string& body) { return "\"" + name + "\":{" + body + "}"; }

TEST_F(SafetensorsTest, RejectsBadFiles) {
  const auto I = StatusCode::kInvalidArgument;
  const auto D = StatusCode::kDataLoss;
  const std::string w4 = T("w", R"("dtype":"F32","shape":[1],"data_offsets":[0,4])");
  const std::vector<BadCase> cases = {
      {"shorter than 8 bytes", "abc", D, {"3 bytes", "header length"}},
      {"empty file", "", D, {"0 bytes"}},
      {"header length beyond file", Raw("{}", 0, 100), D, {"header length 100", "end of the file"}},
      {"header length over limit", Raw("{}", 0, 1ull << 40), I, {"header length", "limit"}},
      {"header not JSON", Raw("{abc", 0), I, {"header", "not valid JSON"}},
      {"header invalid UTF-8", Raw("{\"\xff\":1}", 0), I, {"not valid JSON"}},
      {"trailing garbage", Raw("{} x", 0), I, {"not valid JSON"}},
      {"header JSON array", Raw("[1,2]", 0), I, {"not a JSON object", "array"}},
      {"header JSON number", Raw("5", 0), I, {"not a JSON object"}},
      {"metadata not object", Raw(R"({"__metadata__":"x"})", 0), I, {"__metadata__", "not an object"}},
      {"metadata value not string",
       Raw(R"({"__metadata__":{"k":1}})", 0),
       I,
       {"__metadata__", "'k'", "not a string"}},
      {"metadata null", Raw(R"({"__metadata__":null})", 0), I, {"__metadata__"}},
      {"metadata twice",
       Raw(R"({"__metadata__":{},"__metadata__":{}})", 0),
       I,
       {"duplicate", "__metadata__"}},
      {"metadata duplicate key", Raw(R"({"__metadata__":{"k":"a","k":"b"}})", 0), I, {"__metadata__", "'k'"}},
      {"entry not object", Raw(R"({"w":5})", 0), I, {"'w'", "not an object"}},
      {"missing dtype",
       Raw("{" + T("w", R"("shape":[1],"data_offsets":[0,4])") + "}", 4),
       I,
       {"'w'", "'dtype'"}},
      {"missing shape",
       Raw("{" + T("w", R"("dtype":"F32","data_offsets":[0,4])") + "}", 4),
       I,
       {"'w'", "'shape'"}},
      {"missing data_offsets",
       Raw("{" + T("w", R"("dtype":"F32","shape":[1])") + "}", 4),
       I,
       {"'w'", "'data_offsets'"}},
      {"unknown dtype",
       Raw("{" + T("w", R"("dtype":"F17","shape":[1],"data_offsets":[0,4])") + "}", 4),
       I,
       {"'w'", "dtype", "F17"}},
      {"dtype not string",
       Raw("{" + T("w", R"("dtype":4,"shape":[1],"data_offsets":[0,4])") + "}", 4),
       I,
       {"'w'", "dtype"}},
      {"duplicate field",
       Raw("{" + T("w", R"("dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4])") + "}", 4),
       I,
       {"'w'", "duplicate field 'dtype'"}},
      {"negative shape",
       Raw("{" + T("w", R"("dtype":"F32","shape":[-1],"data_offsets":[0,4])") + "}", 4),
       I,
       {"'w'", "shape", "negative", "-1"}},
      {"non-integer shape",
       Raw("{" + T("w", R"("dtype":"F32","shape":[1.5],"data_offsets":[0,4])") + "}", 4),
       I,
       {"'w'", "shape", "non-integer", "1.5"}},
      {"string in shape",
       Raw("{" + T("w", R"("dtype":"F32","shape":["1"],"data_offsets":[0,4])") + "}", 4),
       I,
       {"'w'", "shape", "not an integer"}},
      {"shape not array",
       Raw("{" + T("w", R"("dtype":"F32","shape":1,"data_offsets":[0,4])") + "}", 4),
       I,
       {"'w'", "shape", "not an array"}},
      {"shape element overflow",
       Raw("{" + T("w", R"("dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4])") + "}", 4),
       I,
       {"'w'", "shape", "too many elements"}},
      {"shape byte overflow",
       Raw("{" + T("w", R"("dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,4])") + "}", 4),
       I,
       {"'w'", "shape", "too large"}},
      {"offsets out of range",
       Raw("{" + T("w", R"("dtype":"F32","shape":[2],"data_offsets":[0,8])") + "}", 4),
       D,
       {"'w'", "data_offsets [0, 8]", "past the data buffer"}},
      {"offsets begin > end",
       Raw("{" + T("w", R"("dtype":"F32","shape":[1],"data_offsets":[4,0])") + "}", 4),
       I,
       {"'w'", "data_offsets [4, 0]", "begin > end"}},
      {"negative offset",
       Raw("{" + T("w", R"("dtype":"F32","shape":[1],"data_offsets":[-4,0])") + "}", 4),
       I,
       {"'w'", "data_offsets", "negative"}},
      {"non-integer offset",
       Raw("{" + T("w", R"("dtype":"F32","shape":[1],"data_offsets":[0,4.0])") + "}", 4),
       I,
       {"'w'", "data_offsets", "non-integer"}},
      {"one offset",
       Raw("{" + T("w", R"("dtype":"F32","shape":[1],"data_offsets":[0])") + "}", 4),
       I,
       {"'w'", "data_offsets", "1 elements"}},
      {"three offsets",
       Raw("{" + T("w", R"("dtype":"F32","shape":[1],"data_offsets":[0,4,4])") + "}", 4),
       I,
       {"'w'", "data_offsets", "more than 2"}},
      {"size mismatch",
       Raw("{" +
               T("model.layers.0.mlp.up_proj.weight",
                 R"("dtype":"BF16","shape":[8,8],"data_offsets":[0,100])") +
               "}",
           100),
       I,
       {"tensor 'model.layers.0.mlp.up_proj.weight': data_offsets [0, 100] has 100 bytes but shape [8, 8] of "
        "BF16 needs 128"}},
      {"overlapping tensors",
       Raw("{" + T("a", R"("dtype":"F32","shape":[2],"data_offsets":[0,8])") + "," +
               T("b", R"("dtype":"F32","shape":[2],"data_offsets":[4,12])") + "}",
           12),
       I,
       {"'b'", "overlaps tensor 'a'", "data_offsets [4, 12]"}},
      {"hole in buffer",
       Raw("{" + T("a", R"("dtype":"F32","shape":[1],"data_offsets":[0,4])") + "," +
               T("b", R"("dtype":"F32","shape":[1],"data_offsets":[8,12])") + "}",
           12),
       I,
       {"'b'", "data_offsets [8, 12]", "hole", "[4, 8)"}},
      {"hole at start",
       Raw("{" + T("w", R"("dtype":"F32","shape":[1],"data_offsets":[4,8])") + "}", 8),
       I,
       {"'w'", "hole"}},
      {"trailing bytes", Raw("{" + w4 + "}", 8), I, {"cover only 4", "'w'", "data_offsets"}},
      {"data but no tensors", Raw("{}", 8), I, {"8 bytes", "no tensors"}},
      {"duplicate names",
       Raw("{" + T("a", R"("dtype":"F32","shape":[1],"data_offsets":[0,4])") + "," +
               T("a", R"("dtype":"F32","shape":[1],"data_offsets":[4,8])") + "}",
           8),
       I,
       {"duplicate tensor name 'a'"}},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.what);
    Put("bad.safetensors", c.bytes);
    auto f = SafetensorsFile::Open(Path("bad.safetensors"));
    ASSERT_FALSE(f.ok());
    std::vector<std::string> needles = c.needles;
    needles.push_back(Path("bad.safetensors") + ": ");
    ExpectError(f.status(), c.code, needles);
    // Same verdict from the pure parser, labelled by the caller.
    auto h = ParseSafetensorsHeader(reinterpret_cast<const uint8_t*>(c.bytes.data()), c.bytes.size(), "lbl");
    ASSERT_FALSE(h.ok());
    EXPECT_EQ(h.status().code(), c.code);
    EXPECT_EQ(h.status().message().rfind("lbl: ", 0), 0u) << h.status().message();
  }
}

TEST_F(SafetensorsTest, OpenMissingAndDirectory) {
  auto f = SafetensorsFile::Open(Path("nope.safetensors"));
  ExpectError(f.status(), StatusCode::kNotFound, {"nope.safetensors"});
  auto d = SafetensorsFile::Open(dir_);
  ExpectError(d.status(), StatusCode::kInvalidArgument, {dir_, "not a regular file"});
}

TEST_F(SafetensorsTest, ShardedCheckpoint) {
  PutShard("model-00001-of-00002.safetensors", {"a", "b"});
  PutShard("model-00002-of-00002.safetensors", {"c"});
  Put("model.safetensors.index.json",
      R"({"metadata":{"total_size":24},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
      R"("b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}})");
  auto ws = WeightStore::Open(dir_);
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  EXPECT_EQ((*ws)->dir(), dir_);
  EXPECT_EQ((*ws)->Names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ((*ws)->files().size(), 2u);
  const auto s1 = fs::file_size(Path("model-00001-of-00002.safetensors"));
  const auto s2 = fs::file_size(Path("model-00002-of-00002.safetensors"));
  EXPECT_EQ((*ws)->total_bytes(), static_cast<int64_t>(s1 + s2));
  const SafetensorsTensor* c = (*ws)->Find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->file, Path("model-00002-of-00002.safetensors"));
  EXPECT_EQ(c->data[0], 1);
  EXPECT_EQ((*ws)->Find("d"), nullptr);
  auto r = (*ws)->Require("a", {2});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->file, Path("model-00001-of-00002.safetensors"));
}

TEST_F(SafetensorsTest, RejectsBadIndex) {
  const auto I = StatusCode::kInvalidArgument;
  PutShard("s1.safetensors", {"a", "b"});
  PutShard("s2.safetensors", {"b2", "c"});
  PutShard("s3.safetensors", {"a"});  // 'a' again
  struct IndexCase {
    const char* what;
    std::string json;
    StatusCode code;
    std::vector<std::string> needles;
  };
  const std::vector<IndexCase> cases = {
      {"malformed", R"({"weight_map": {"a": "s1.safetensors",)", I, {"not valid JSON"}},
      {"not object", R"(["s1.safetensors"])", I, {"not a JSON object"}},
      {"no weight_map", R"({"metadata": {}})", I, {"'weight_map'"}},
      {"weight_map not object",
       R"({"weight_map": ["s1.safetensors"]})",
       I,
       {"'weight_map'", "not an object"}},
      {"weight_map empty", R"({"weight_map": {}})", I, {"'weight_map'", "empty"}},
      {"entry not string", R"({"weight_map": {"a": 1}})", I, {"'a'", "not a string"}},
      {"shard missing",
       R"({"weight_map": {"a": "s1.safetensors", "z": "gone.safetensors"}})",
       StatusCode::kNotFound,
       {"gone.safetensors", "'z'"}},
      {"tensor not in named shard",
       R"({"weight_map": {"a": "s1.safetensors", "c": "s1.safetensors"}})",
       I,
       {"'c'", "s1.safetensors", "no such tensor"}},
      {"path escape", R"({"weight_map": {"a": "../s1.safetensors"}})", I, {"'a'", "../s1.safetensors"}},
      {"absolute path", R"({"weight_map": {"a": "/etc/passwd"}})", I, {"'a'", "/etc/passwd"}},
      {"dot dot", R"({"weight_map": {"a": ".."}})", I, {"'a'", "'..'"}},
      {"listed twice",
       R"({"weight_map": {"a": "s1.safetensors", "a": "s3.safetensors"}})",
       I,
       {"'a'", "twice"}},
      {"present in two shards",
       R"({"weight_map": {"b": "s1.safetensors", "a": "s3.safetensors"}})",
       I,
       {"'a'", "both", "s1.safetensors", "s3.safetensors"}},
  };
  for (const IndexCase& c : cases) {
    SCOPED_TRACE(c.what);
    Put("model.safetensors.index.json", c.json);
    auto ws = WeightStore::Open(dir_);
    ASSERT_FALSE(ws.ok());
    std::vector<std::string> needles = c.needles;
    // The two-shard conflict is found after the index checks out; it names the dir.
    needles.push_back(std::string(c.what) == "present in two shards" ? dir_ : "model.safetensors.index.json");
    ExpectError(ws.status(), c.code, needles);
  }
}

TEST_F(SafetensorsTest, CorruptShardNamesIndexAndShard) {
  Put("s1.safetensors", Raw("{" + T("w", R"("dtype":"F32","shape":[2],"data_offsets":[0,8])") + "}", 4));
  Put("model.safetensors.index.json", R"({"weight_map": {"w": "s1.safetensors"}})");
  auto ws = WeightStore::Open(dir_);
  ExpectError(ws.status(), StatusCode::kDataLoss,
              {"model.safetensors.index.json", Path("s1.safetensors"), "'w'", "data_offsets"});
}

TEST_F(SafetensorsTest, MissingCheckpoint) {
  auto ws = WeightStore::Open(dir_);
  ExpectError(ws.status(), StatusCode::kNotFound, {dir_});
  auto ws2 = WeightStore::Open(Path("no_such_dir"));
  ExpectError(ws2.status(), StatusCode::kNotFound, {"no_such_dir"});
}

TEST_F(SafetensorsTest, RequireChecksNameShapeAndDType) {
  std::vector<SafetensorsTensorToWrite> w = {
      {"w", DType::kBF16, {2, 3}, [](uint8_t* d) { std::memset(d, 0, 12); }},
      {"ids", DType::kI64, {2}, [](uint8_t* d) { std::memset(d, 0, 16); }},
  };
  ASSERT_TRUE(WriteSafetensors(Path("model.safetensors"), w, {}).ok());
  auto ws = WeightStore::Open(dir_);
  ASSERT_TRUE(ws.ok()) << ws.status().ToString();
  EXPECT_TRUE((*ws)->Require("w", {2, 3}).ok());
  ExpectError((*ws)->Require("w", {3, 2}).status(), StatusCode::kInvalidArgument,
              {Path("model.safetensors") + ": tensor 'w' has shape [2, 3], expected [3, 2]"});
  ExpectError((*ws)->Require("w", {6}).status(), StatusCode::kInvalidArgument,
              {"'w'", "[2, 3]", "expected [6]"});
  ExpectError((*ws)->Require("nope", {1}).status(), StatusCode::kNotFound,
              {dir_ + ": missing tensor 'nope'"});
  ExpectError((*ws)->Require("ids", {2}).status(), StatusCode::kUnimplemented,
              {"model.safetensors", "'ids'", "I64"});

  // A dtype Tessera has no DType for at all.
  fs::remove(Path("model.safetensors"));
  Put("model.safetensors",
      Raw("{" + T("q", R"("dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4])") + "}", 4));
  auto ws2 = WeightStore::Open(dir_);
  ASSERT_TRUE(ws2.ok()) << ws2.status().ToString();
  EXPECT_FALSE((*ws2)->Find("q")->dtype.has_value());
  ExpectError((*ws2)->Require("q", {4}).status(), StatusCode::kUnimplemented,
              {"model.safetensors", "'q'", "F8_E4M3"});
}

TEST_F(SafetensorsTest, WriterErrors) {
  auto fill = [](uint8_t* d) { std::memset(d, 0, 4); };
  ExpectError(WriteSafetensors(Path("no_dir/x.safetensors"), {{"a", DType::kF32, {1}, fill}}, {}),
              StatusCode::kNotFound, {"no_dir/x.safetensors"});
  ExpectError(WriteSafetensors(Path("x.safetensors"),
                               {{"a", DType::kF32, {1}, fill}, {"a", DType::kF32, {1}, fill}}, {}),
              StatusCode::kInvalidArgument, {"x.safetensors", "'a'", "duplicate"});
  ExpectError(WriteSafetensors(Path("x.safetensors"), {{"a", DType::kF32, {-1}, fill}}, {}),
              StatusCode::kInvalidArgument, {"x.safetensors", "'a'", "negative"});
  ExpectError(WriteSafetensors(Path("x.safetensors"), {{"__metadata__", DType::kF32, {1}, fill}}, {}),
              StatusCode::kInvalidArgument, {"x.safetensors", "reserved"});
  ExpectError(WriteSafetensors(Path("x.safetensors"), {{"a", DType::kF32, {1}, nullptr}}, {}),
              StatusCode::kInvalidArgument, {"x.safetensors", "'a'", "fill"});
  ExpectError(WriteSafetensors(Path("x.safetensors"), {{"bad\xff", DType::kF32, {1}, fill}}, {}),
              StatusCode::kInvalidArgument, {"x.safetensors", "UTF-8"});
  EXPECT_FALSE(fs::exists(Path("x.safetensors")));
  struct stat st;
  if (::stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode)) {
    std::vector<SafetensorsTensorToWrite> big = {
        {"a", DType::kF32, {1 << 20}, [](uint8_t* d) { std::memset(d, 0, 4 << 20); }}};
    ExpectError(WriteSafetensors("/dev/full", big, {}), StatusCode::kResourceExhausted,
                {"/dev/full", "short write"});
    EXPECT_TRUE(fs::exists("/dev/full"));
  }
}

}  // namespace
}  // namespace tessera
