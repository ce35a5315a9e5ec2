// GGUF (llama.cpp's single-file model format, versions 2 and 3): a validating
// parser over a memory image, an mmap-backed file, and a streaming writer.
//
// Layout (little endian): "GGUF", u32 version, u64 tensor_count, u64 kv_count,
// kv_count metadata pairs (string key, u32 value type, value), tensor_count
// tensor infos (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64
// offset), padding to `general.alignment` (default 32), then the data section.
// Strings are u64 length + bytes; arrays are u32 element type + u64 count +
// elements. ne[0] is the fastest-varying dimension, so ne = [K, N] is our
// [N rows, K cols] matrix.
//
// Nothing in a file is trusted. Status codes: DataLoss when the file ends
// before what its header promises; Unimplemented for a valid GGML tensor type
// Tessera cannot use; InvalidArgument for every other bad value. Messages name
// the file and the field or tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "engine/mapped_file.h"
#include "common/status.h"

namespace tessera {

enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
std::string_view GgufTypeName(GgufType t);

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxArrayDepth = 8;  // nested arrays deeper than this are rejected

// One metadata value. Integers keep their bits in `u` (signed ones sign-extended),
// floats in `f`, strings in `str`; arrays hold `array_type` elements in `array`.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t u = 0;
  double f = 0.0;
  std::string str;
  GgufType array_type = GgufType::kUint8;
  std::vector<GgufValue> array;

  static GgufValue Uint(GgufType t, uint64_t v);
  static GgufValue Int(GgufType t, int64_t v);
  static GgufValue U32(uint32_t v) { return Uint(GgufType::kUint32, v); }
  static GgufValue I32(int32_t v) { return Int(GgufType::kInt32, v); }
  static GgufValue U64(uint64_t v) { return Uint(GgufType::kUint64, v); }
  static GgufValue F32(float v);
  static GgufValue F64(double v);
  static GgufValue Bool(bool v);
  static GgufValue Str(std::string v);
  static GgufValue Array(GgufType elem_type, std::vector<GgufValue> elems);
  static GgufValue StrArray(const std::vector<std::string>& v);

  bool is_integer() const;
  bool is_float() const { return type == GgufType::kFloat32 || type == GgufType::kFloat64; }
  // Integer value (any integer type; unsigned values above INT64_MAX fail).
  std::optional<int64_t> AsInt() const;
  // Number value of an integer or float.
  std::optional<double> AsDouble() const;
  bool operator==(const GgufValue& o) const;
};

// GGML tensor type ids (ggml.h `enum ggml_type`).
std::string_view GgmlTypeName(uint32_t type_id);  // "" for unknown ids
// Tessera dtype of a GGML type id, when supported (F32, F16, BF16, Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, Q2_K .. Q6_K, IQ4_NL, IQ4_XS, MXFP4).
std::optional<DType> DTypeFromGgml(uint32_t type_id);
uint32_t GgmlTypeFromDType(DType t);  // dtype must be one of the supported ones

struct GgufTensor {
  std::string name;
  std::vector<int64_t> ne;  // ne[0] fastest varying, 1..4 dims, all > 0
  uint32_t ggml_type = 0;
  DType dtype = DType::kF32;
  uint64_t offset = 0;  // relative to the data section, multiple of the alignment
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;  // into the parsed image
  int64_t cols() const { return ne[0]; }
  int64_t rows() const;  // product of ne[1..]
  // Our shape: ne reversed (outermost first).
  std::vector<int64_t> shape() const { return {ne.rbegin(), ne.rend()}; }
};

struct GgufContents {
  uint32_t version = 0;
  uint32_t alignment = kGgufDefaultAlignment;
  uint64_t data_offset = 0;  // start of the data section in the file
  std::vector<std::pair<std::string, GgufValue>> metadata;  // file order
  std::vector<GgufTensor> tensors;                          // file order
  const GgufValue* Find(std::string_view key) const;
  const GgufTensor* FindTensor(std::string_view name) const;
};

// Parses and validates a whole GGUF image. Pure: no I/O; memory use is
// bounded by a small multiple of `size`. Tensor data pointers point into `bytes`.
StatusOr<GgufContents> ParseGguf(const uint8_t* bytes, size_t size, std::string_view file_label);

// One read-only mapped .gguf file; immutable after Open (const methods are
// thread-safe). Tensor pointers stay valid while it lives.
class GgufFile {
 public:
  static StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  const std::string& path() const { return file_->path(); }
  const GgufContents& contents() const { return contents_; }
  uint64_t file_bytes() const { return file_->size(); }

 private:
  GgufFile() = default;
  std::unique_ptr<MappedFile> file_;
  GgufContents contents_;
};

struct GgufTensorToWrite {
  std::string name;
  DType dtype = DType::kF32;        // F32, F16, BF16 or a quantized type
  std::vector<int64_t> shape;       // ours: outermost first; written reversed as ne
  std::function<void(uint8_t* dst)> fill;  // writes exactly the tensor's byte size
};

// Bytes of a tensor of `shape` (ours) in `dtype`; -1 if the last dim is not a
// multiple of the block size or the size overflows.
int64_t GgufTensorBytes(DType dtype, const std::vector<int64_t>& shape);

// Writes a GGUF v3 file, alignment 32 (or metadata "general.alignment" when it
// is a u32 power of two), tensors in the given order. Streams one tensor at a
// time. `progress` (optional) is called after each tensor with its index.
// On failure a partially written file is removed.
Status WriteGguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                 const std::vector<GgufTensorToWrite>& tensors,
                 const std::function<void(size_t)>& progress = nullptr);

}  // namespace tessera
