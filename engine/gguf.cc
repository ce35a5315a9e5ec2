#include "engine/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

namespace tessera {
namespace {

constexpr uint64_t kMaxStringBytes = 1ull << 30;  // a key, name or value string
constexpr uint64_t kMaxNameBytes = 1ull << 16;    // tensor names and keys

struct GgmlTypeInfo {
  uint32_t id;
  const char* name;
};
// Every type id ggml.h defines (removed ids 4, 5, 31-33, 36-38 are unknown), so a
// type Tessera refuses still names itself.
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {0, "F32"},       {1, "F16"},      {2, "Q4_0"},    {3, "Q4_1"},     {6, "Q5_0"},     {7, "Q5_1"},
    {8, "Q8_0"},      {9, "Q8_1"},     {10, "Q2_K"},   {11, "Q3_K"},    {12, "Q4_K"},    {13, "Q5_K"},
    {14, "Q6_K"},     {15, "Q8_K"},    {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"},
    {20, "IQ4_NL"},   {21, "IQ3_S"},   {22, "IQ2_S"},  {23, "IQ4_XS"},  {24, "I8"},      {25, "I16"},
    {26, "I32"},      {27, "I64"},     {28, "F64"},    {29, "IQ1_M"},   {30, "BF16"},    {34, "TQ1_0"},
    {35, "TQ2_0"},    {39, "MXFP4"},   {40, "NVFP4"},  {41, "Q1_0"},    {42, "Q2_0"},
};

std::string Q(std::string_view s) {
  // Names in messages: printable ASCII kept, the rest escaped, long names cut.
  std::string out;
  for (size_t i = 0; i < s.size() && i < 200; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > 200) out += "...";
  return out;
}

// Bounds-checked little-endian reader over the image.
class Reader {
 public:
  Reader(const uint8_t* p, size_t n, std::string label) : p_(p), n_(n), label_(std::move(label)) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return n_ - pos_; }
  const std::string& label() const { return label_; }

  Status Need(uint64_t bytes, const std::string& what) const {
    if (bytes > remaining()) {
      return DataLoss(label_ + ": " + what + " needs " + std::to_string(bytes) + " bytes at offset " +
                      std::to_string(pos_) + " but the file ends at " + std::to_string(n_) + " (truncated)");
    }
    return Status::Ok();
  }
  template <typename T>
  Status Read(T* out, const std::string& what) {
    RETURN_IF_ERROR(Need(sizeof(T), what));
    std::memcpy(out, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::Ok();
  }
  Status ReadString(std::string* out, uint64_t max_len, const std::string& what) {
    uint64_t len = 0;
    RETURN_IF_ERROR(Read(&len, what + " length"));
    if (len > remaining()) {
      return DataLoss(label_ + ": " + what + " length " + std::to_string(len) + " runs past the end of the file");
    }
    if (len > max_len) {
      return InvalidArgument(label_ + ": " + what + " length " + std::to_string(len) + " exceeds the limit " +
                             std::to_string(max_len));
    }
    out->assign(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return Status::Ok();
  }

 private:
  const uint8_t* p_;
  uint64_t n_;
  uint64_t pos_ = 0;
  std::string label_;
};

// Smallest encoded size of one value of type t (for bounding counts).
uint64_t MinValueBytes(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: case GgufType::kString: return 8;
    case GgufType::kArray: return 12;
  }
  return 1;
}

bool ValidType(uint32_t t) { return t <= 12; }

Status ReadValue(Reader& r, GgufType type, int depth, const std::string& what, GgufValue* out) {
  out->type = type;
  auto read_uint = [&](auto v) -> Status {
    RETURN_IF_ERROR(r.Read(&v, what));
    out->u = static_cast<uint64_t>(v);
    return Status::Ok();
  };
  auto read_int = [&](auto v) -> Status {
    RETURN_IF_ERROR(r.Read(&v, what));
    out->u = static_cast<uint64_t>(static_cast<int64_t>(v));
    return Status::Ok();
  };
  switch (type) {
    case GgufType::kUint8: return read_uint(uint8_t{});
    case GgufType::kInt8: return read_int(int8_t{});
    case GgufType::kUint16: return read_uint(uint16_t{});
    case GgufType::kInt16: return read_int(int16_t{});
    case GgufType::kUint32: return read_uint(uint32_t{});
    case GgufType::kInt32: return read_int(int32_t{});
    case GgufType::kUint64: return read_uint(uint64_t{});
    case GgufType::kInt64: return read_int(int64_t{});
    case GgufType::kFloat32: {
      float f = 0;
      RETURN_IF_ERROR(r.Read(&f, what));
      out->f = f;
      return Status::Ok();
    }
    case GgufType::kFloat64: return r.Read(&out->f, what);
    case GgufType::kBool: {
      uint8_t b = 0;
      RETURN_IF_ERROR(r.Read(&b, what));
      if (b > 1) return InvalidArgument(r.label() + ": " + what + " is a bool with value " + std::to_string(b));
      out->u = b;
      return Status::Ok();
    }
    case GgufType::kString: return r.ReadString(&out->str, kMaxStringBytes, what);
    case GgufType::kArray: {
      if (depth >= kGgufMaxArrayDepth) {
        return InvalidArgument(r.label() + ": " + what + " nests arrays deeper than " +
                               std::to_string(kGgufMaxArrayDepth));
      }
      uint32_t et = 0;
      RETURN_IF_ERROR(r.Read(&et, what + " element type"));
      if (!ValidType(et)) {
        return InvalidArgument(r.label() + ": " + what + " has unknown element type " + std::to_string(et));
      }
      out->array_type = static_cast<GgufType>(et);
      uint64_t count = 0;
      RETURN_IF_ERROR(r.Read(&count, what + " length"));
      if (count > r.remaining() / MinValueBytes(out->array_type)) {
        return DataLoss(r.label() + ": " + what + " length " + std::to_string(count) +
                        " runs past the end of the file");
      }
      out->array.resize(count);
      for (uint64_t i = 0; i < count; ++i) {
        RETURN_IF_ERROR(ReadValue(r, out->array_type, depth + 1, what + "[" + std::to_string(i) + "]",
                                  &out->array[i]));
      }
      return Status::Ok();
    }
  }
  return InvalidArgument(r.label() + ": " + what + " has unknown type");
}


}  // namespace

std::string_view GgufTypeName(GgufType t) {
  static constexpr const char* kNames[] = {"uint8", "int8",  "uint16", "int16", "uint32", "int32", "float32",
                                           "bool",  "string", "array", "uint64", "int64", "float64"};
  const auto i = static_cast<uint32_t>(t);
  return i <= 12 ? kNames[i] : "unknown";
}

GgufValue GgufValue::Uint(GgufType t, uint64_t v) {
  GgufValue x;
  x.type = t;
  x.u = v;
  return x;
}
GgufValue GgufValue::Int(GgufType t, int64_t v) {
  GgufValue x;
  x.type = t;
  x.u = static_cast<uint64_t>(v);
  return x;
}
GgufValue GgufValue::F32(float v) {
  GgufValue x;
  x.type = GgufType::kFloat32;
  x.f = v;
  return x;
}
GgufValue GgufValue::F64(double v) {
  GgufValue x;
  x.type = GgufType::kFloat64;
  x.f = v;
  return x;
}
GgufValue GgufValue::Bool(bool v) { return Uint(GgufType::kBool, v ? 1 : 0); }
GgufValue GgufValue::Str(std::string v) {
  GgufValue x;
  x.type = GgufType::kString;
  x.str = std::move(v);
  return x;
}
GgufValue GgufValue::Array(GgufType elem_type, std::vector<GgufValue> elems) {
  GgufValue x;
  x.type = GgufType::kArray;
  x.array_type = elem_type;
  x.array = std::move(elems);
  return x;
}
GgufValue GgufValue::StrArray(const std::vector<std::string>& v) {
  std::vector<GgufValue> e;
  e.reserve(v.size());
  for (const auto& s : v) e.push_back(Str(s));
  return Array(GgufType::kString, std::move(e));
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kUint16: case GgufType::kInt16:
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kUint64: case GgufType::kInt64: return true;
    default: return false;
  }
}

std::optional<int64_t> GgufValue::AsInt() const {
  if (!is_integer()) return std::nullopt;
  const bool unsigned_type = type == GgufType::kUint8 || type == GgufType::kUint16 ||
                             type == GgufType::kUint32 || type == GgufType::kUint64;
  if (unsigned_type && u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
  return static_cast<int64_t>(u);
}

std::optional<double> GgufValue::AsDouble() const {
  if (is_float()) return f;
  if (auto i = AsInt()) return static_cast<double>(*i);
  if (type == GgufType::kUint64) return static_cast<double>(u);
  return std::nullopt;
}

bool GgufValue::operator==(const GgufValue& o) const {
  if (type != o.type) return false;
  switch (type) {
    case GgufType::kFloat32: case GgufType::kFloat64:
      return f == o.f || (std::isnan(f) && std::isnan(o.f));
    case GgufType::kString: return str == o.str;
    case GgufType::kArray: return array_type == o.array_type && array == o.array;
    default: return u == o.u;
  }
}

std::string_view GgmlTypeName(uint32_t id) {
  for (const auto& t : kGgmlTypes) {
    if (t.id == id) return t.name;
  }
  return "";
}

std::optional<DType> DTypeFromGgml(uint32_t id) {
  switch (id) {
    case 0: return DType::kF32;
    case 1: return DType::kF16;
    case 2: return DType::kQ4_0;
    case 3: return DType::kQ4_1;
    case 6: return DType::kQ5_0;
    case 7: return DType::kQ5_1;
    case 8: return DType::kQ8_0;
    case 10: return DType::kQ2_K;
    case 11: return DType::kQ3_K;
    case 12: return DType::kQ4_K;
    case 13: return DType::kQ5_K;
    case 14: return DType::kQ6_K;
    case 20: return DType::kIQ4_NL;
    case 23: return DType::kIQ4_XS;
    case 30: return DType::kBF16;
    case 39: return DType::kMXFP4;
    default: return std::nullopt;
  }
}

uint32_t GgmlTypeFromDType(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ5_0: return 6;
    case DType::kQ5_1: return 7;
    case DType::kQ8_0: return 8;
    case DType::kQ2_K: return 10;
    case DType::kQ3_K: return 11;
    case DType::kQ4_K: return 12;
    case DType::kQ5_K: return 13;
    case DType::kQ6_K: return 14;
    case DType::kIQ4_NL: return 20;
    case DType::kIQ4_XS: return 23;
    case DType::kMXFP4: return 39;
    case DType::kBF16: return 30;
    default: return UINT32_MAX;
  }
}

int64_t GgufTensor::rows() const {
  int64_t r = 1;
  for (size_t i = 1; i < ne.size(); ++i) r *= ne[i];
  return r;
}

const GgufValue* GgufContents::Find(std::string_view key) const {
  for (const auto& [k, v] : metadata) {
    if (k == key) return &v;
  }
  return nullptr;
}

const GgufTensor* GgufContents::FindTensor(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

StatusOr<GgufContents> ParseGguf(const uint8_t* bytes, size_t size, std::string_view file_label) {
  const std::string label(file_label);
  Reader r(bytes, size, label);
  GgufContents c;
  uint32_t magic = 0;
  RETURN_IF_ERROR(r.Read(&magic, "header magic"));
  if (std::memcmp(&magic, "GGUF", 4) != 0) return InvalidArgument(label + ": not a GGUF file (magic is not 'GGUF')");
  RETURN_IF_ERROR(r.Read(&c.version, "header version"));
  if (c.version != 2 && c.version != 3) {
    return Unimplemented(label + ": GGUF version " + std::to_string(c.version) + " is not supported (2 and 3 are)");
  }
  uint64_t tensor_count = 0, kv_count = 0;
  RETURN_IF_ERROR(r.Read(&tensor_count, "header tensor_count"));
  RETURN_IF_ERROR(r.Read(&kv_count, "header kv_count"));
  // A key-value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a
  // tensor info at least 8 + 4 + 8 + 4 + 8.
  if (kv_count > r.remaining() / 13) {
    return DataLoss(label + ": header kv_count " + std::to_string(kv_count) + " cannot fit in the file");
  }
  if (tensor_count > r.remaining() / 32) {
    return DataLoss(label + ": header tensor_count " + std::to_string(tensor_count) + " cannot fit in the file");
  }
  std::set<std::string, std::less<>> keys;
  c.metadata.reserve(kv_count);
  for (uint64_t i = 0; i < kv_count; ++i) {
    const std::string where = "metadata[" + std::to_string(i) + "]";
    std::string key;
    RETURN_IF_ERROR(r.ReadString(&key, kMaxNameBytes, where + " key"));
    if (!keys.insert(key).second) return InvalidArgument(label + ": duplicate metadata key '" + Q(key) + "'");
    uint32_t type = 0;
    RETURN_IF_ERROR(r.Read(&type, "metadata '" + Q(key) + "' type"));
    if (!ValidType(type)) {
      return InvalidArgument(label + ": metadata '" + Q(key) + "' has unknown value type " + std::to_string(type));
    }
    GgufValue v;
    RETURN_IF_ERROR(ReadValue(r, static_cast<GgufType>(type), 0, "metadata '" + Q(key) + "'", &v));
    c.metadata.emplace_back(std::move(key), std::move(v));
  }
  if (const GgufValue* a = c.Find("general.alignment")) {
    const auto v = a->AsInt();
    if (a->type != GgufType::kUint32 || !v || *v == 0 || (*v & (*v - 1)) != 0) {
      return InvalidArgument(label + ": metadata 'general.alignment' must be a uint32 power of two");
    }
    c.alignment = static_cast<uint32_t>(*v);
  }

  std::set<std::string, std::less<>> names;
  c.tensors.reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensor t;
    RETURN_IF_ERROR(r.ReadString(&t.name, kMaxNameBytes, "tensor_info[" + std::to_string(i) + "] name"));
    const std::string what = "tensor '" + Q(t.name) + "'";
    if (!names.insert(t.name).second) return InvalidArgument(label + ": duplicate " + what);
    uint32_t n_dims = 0;
    RETURN_IF_ERROR(r.Read(&n_dims, what + " n_dims"));
    if (n_dims < 1 || n_dims > 4) {
      return InvalidArgument(label + ": " + what + " n_dims " + std::to_string(n_dims) + " is not in [1, 4]");
    }
    uint64_t elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = 0;
      RETURN_IF_ERROR(r.Read(&ne, what + " ne[" + std::to_string(d) + "]"));
      // 2^56 elements bounds every byte size below 2^59 (at most 4 bytes/element).
      if (ne == 0 || ne > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(elems, ne, &elems) ||
          elems > (1ull << 56)) {
        return InvalidArgument(label + ": " + what + " ne[" + std::to_string(d) + "] = " + std::to_string(ne) +
                               (ne == 0 ? " is zero" : " overflows the element count"));
      }
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    RETURN_IF_ERROR(r.Read(&t.ggml_type, what + " type"));
    RETURN_IF_ERROR(r.Read(&t.offset, what + " offset"));
    const std::string_view tname = GgmlTypeName(t.ggml_type);
    if (tname.empty()) {
      return InvalidArgument(label + ": " + what + " has unknown GGML type id " + std::to_string(t.ggml_type));
    }
    const auto dt = DTypeFromGgml(t.ggml_type);
    if (!dt) {
      return Unimplemented(label + ": " + what + " has GGML type " + std::string(tname) +
                           ", which Tessera does not support (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, "
                             "Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and MXFP4 are)");
    }
    t.dtype = *dt;
    const int64_t row_bytes = DTypeRowBytes(t.dtype, t.ne[0]);
    if (row_bytes < 0) {
      return InvalidArgument(label + ": " + what + " row length ne[0] = " + std::to_string(t.ne[0]) +
                             " is not a multiple of the " + std::string(tname) + " block size " +
                             std::to_string(DTypeBlockElems(t.dtype)));
    }
    uint64_t nbytes;
    if (__builtin_mul_overflow(static_cast<uint64_t>(row_bytes), static_cast<uint64_t>(t.rows()), &nbytes)) {
      return InvalidArgument(label + ": " + what + " byte size overflows");
    }
    t.nbytes = nbytes;
    if (t.offset % c.alignment != 0) {
      return InvalidArgument(label + ": " + what + " offset " + std::to_string(t.offset) +
                             " is not a multiple of the alignment " + std::to_string(c.alignment));
    }
    c.tensors.push_back(std::move(t));
  }
  // Data section: the next multiple of the alignment.
  const uint64_t pos = r.pos();
  c.data_offset = (pos + c.alignment - 1) / c.alignment * c.alignment;
  if (!c.tensors.empty() && c.data_offset > size) {
    return DataLoss(label + ": data section at offset " + std::to_string(c.data_offset) +
                    " starts past the end of the file (truncated)");
  }
  const uint64_t data_bytes = c.data_offset <= size ? size - c.data_offset : 0;
  std::vector<const GgufTensor*> by_offset;
  for (GgufTensor& t : c.tensors) {
    uint64_t end;
    if (__builtin_add_overflow(t.offset, t.nbytes, &end) || end > data_bytes) {
      return DataLoss(label + ": tensor '" + Q(t.name) + "' data [" + std::to_string(t.offset) + ", +" +
                      std::to_string(t.nbytes) + ") runs past the end of the file (data section has " +
                      std::to_string(data_bytes) + " bytes)");
    }
    t.data = bytes + c.data_offset + t.offset;
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i - 1]->offset + by_offset[i - 1]->nbytes > by_offset[i]->offset) {
      return InvalidArgument(label + ": tensors '" + Q(by_offset[i - 1]->name) + "' and '" +
                             Q(by_offset[i]->name) + "' overlap");
    }
  }
  return c;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  ASSIGN_OR_RETURN(f->file_, MappedFile::Open(path));
  ASSIGN_OR_RETURN(f->contents_, ParseGguf(f->file_->data(), f->file_->size(), path));
  return f;
}

GgufFile::~GgufFile() = default;

// ---------------------------------------------------------------------------
// Writer

namespace {

template <typename T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void PutString(std::string* out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out->append(s);
}

Status PutValue(std::string* out, const GgufValue& v, int depth) {
  switch (v.type) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: Put<uint8_t>(out, static_cast<uint8_t>(v.u)); break;
    case GgufType::kUint16: case GgufType::kInt16: Put<uint16_t>(out, static_cast<uint16_t>(v.u)); break;
    case GgufType::kUint32: case GgufType::kInt32: Put<uint32_t>(out, static_cast<uint32_t>(v.u)); break;
    case GgufType::kUint64: case GgufType::kInt64: Put<uint64_t>(out, v.u); break;
    case GgufType::kFloat32: Put<float>(out, static_cast<float>(v.f)); break;
    case GgufType::kFloat64: Put<double>(out, v.f); break;
    case GgufType::kString: PutString(out, v.str); break;
    case GgufType::kArray:
      if (depth >= kGgufMaxArrayDepth) return InvalidArgument("arrays nested too deeply");
      Put<uint32_t>(out, static_cast<uint32_t>(v.array_type));
      Put<uint64_t>(out, v.array.size());
      for (const GgufValue& e : v.array) {
        if (e.type != v.array_type) return InvalidArgument("array element type differs from the array's");
        RETURN_IF_ERROR(PutValue(out, e, depth + 1));
      }
      break;
  }
  return Status::Ok();
}

}  // namespace

int64_t GgufTensorBytes(DType dtype, const std::vector<int64_t>& shape) {
  if (shape.empty()) return -1;
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) {
    if (shape[i] <= 0 || __builtin_mul_overflow(rows, shape[i], &rows)) return -1;
  }
  if (shape.back() <= 0 || shape.back() > (int64_t{1} << 56)) return -1;
  const int64_t row = DTypeRowBytes(dtype, shape.back());
  int64_t total;
  if (row < 0 || __builtin_mul_overflow(rows, row, &total)) return -1;
  return total;
}

Status WriteGguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                 const std::vector<GgufTensorToWrite>& tensors, const std::function<void(size_t)>& progress) {
  uint32_t alignment = kGgufDefaultAlignment;
  std::string head;
  head.append("GGUF", 4);
  Put<uint32_t>(&head, 3);
  Put<uint64_t>(&head, tensors.size());
  Put<uint64_t>(&head, metadata.size());
  std::set<std::string> keys;
  for (const auto& [k, v] : metadata) {
    if (!keys.insert(k).second) return InvalidArgument(path + ": duplicate metadata key '" + Q(k) + "'");
    if (k == "general.alignment") {
      if (v.type != GgufType::kUint32 || v.u == 0 || (v.u & (v.u - 1)) != 0) {
        return InvalidArgument(path + ": metadata 'general.alignment' must be a uint32 power of two");
      }
      alignment = static_cast<uint32_t>(v.u);
    }
    PutString(&head, k);
    Put<uint32_t>(&head, static_cast<uint32_t>(v.type));
    if (Status s = PutValue(&head, v, 0); !s.ok()) {
      return InvalidArgument(path + ": metadata '" + Q(k) + "': " + std::string(s.message()));
    }
  }
  std::vector<uint64_t> sizes;
  std::set<std::string> names;
  uint64_t offset = 0, max_size = 0;
  for (const auto& t : tensors) {
    const std::string what = path + ": tensor '" + Q(t.name) + "': ";
    if (!names.insert(t.name).second) return InvalidArgument(what + "duplicate name");
    if (GgmlTypeFromDType(t.dtype) == UINT32_MAX) return InvalidArgument(what + "dtype has no GGML type");
    if (t.shape.empty() || t.shape.size() > 4) return InvalidArgument(what + "must have 1 to 4 dims");
    const int64_t n = GgufTensorBytes(t.dtype, t.shape);
    if (n < 0) return InvalidArgument(what + "bad shape for " + std::string(DTypeName(t.dtype)));
    if (!t.fill) return InvalidArgument(what + "no fill function");
    PutString(&head, t.name);
    Put<uint32_t>(&head, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) Put<uint64_t>(&head, static_cast<uint64_t>(*it));
    Put<uint32_t>(&head, GgmlTypeFromDType(t.dtype));
    Put<uint64_t>(&head, offset);
    sizes.push_back(static_cast<uint64_t>(n));
    max_size = std::max<uint64_t>(max_size, n);
    offset += (static_cast<uint64_t>(n) + alignment - 1) / alignment * alignment;
  }
  head.append((alignment - head.size() % alignment) % alignment, '\0');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return InvalidArgument(path + ": cannot open for writing: " + std::strerror(errno));
  Status status = [&]() -> Status {
    out.write(head.data(), static_cast<std::streamsize>(head.size()));
    try {
      std::vector<uint8_t> buf;
      buf.reserve(max_size);
      for (size_t i = 0; i < tensors.size(); ++i) {
        const uint64_t padded = (sizes[i] + alignment - 1) / alignment * alignment;
        buf.assign(padded, 0);
        tensors[i].fill(buf.data());
        out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(padded));
        if (!out) break;
        if (progress) progress(i);
      }
    } catch (const std::bad_alloc&) {
      return ResourceExhausted(path + ": out of memory for a " + std::to_string(max_size) + "-byte tensor");
    }
    out.flush();
    if (!out) return ResourceExhausted(path + ": write failed: " + std::strerror(errno));
    return Status::Ok();
  }();
  out.close();
  if (!status.ok()) std::remove(path.c_str());
  return status;
}

}  // namespace tessera
