// Safetensors checkpoints: a validating header parser, an mmap-backed file, a
// whole-checkpoint WeightStore (single file or sharded via index.json), and a
// streaming writer for synthetic checkpoints.
//
// Format: u64 LE header length N, N bytes of UTF-8 JSON, then the data buffer.
// Nothing in a file is trusted: offsets, sizes, dtypes and shapes are checked
// before any tensor pointer is handed out.
//
// Status codes: DataLoss for a truncated file (shorter than its header or its
// offsets say), NotFound for missing files/tensors, Unimplemented for a valid
// dtype we cannot use as a weight, InvalidArgument for any other malformed or
// inconsistent content. Messages name the file, the tensor and the field.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "engine/mapped_file.h"

namespace tessera {

// Largest accepted JSON header; the reference implementation uses the same.
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100ull << 20;

struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;      // as in the file, e.g. "BF16"
  std::optional<DType> dtype;  // set for F32/F16/BF16/I32/I64
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data buffer, begin <= end
  uint64_t end = 0;
  // Start of the tensor's bytes (end - begin of them). No alignment is
  // guaranteed beyond what the file's offsets give.
  const uint8_t* data = nullptr;
  std::string file;  // label/path of the file holding it

  uint64_t nbytes() const { return end - begin; }
  int64_t numel() const;
};

struct SafetensorsHeader {
  std::vector<SafetensorsTensor> tensors;  // ordered by data offset
  std::map<std::string, std::string> metadata;
  uint64_t header_bytes = 0;  // N
  uint64_t data_offset = 0;   // 8 + N: where the data buffer starts in the file
  uint64_t data_bytes = 0;    // size of the data buffer
};

// Element size in bytes of a safetensors dtype name ("BF16" -> 2); 0 if the
// name is not one of BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32
// F64 I64 U64.
int64_t SafetensorsDTypeSize(std::string_view name);

// Parses and fully validates a safetensors file given as its whole contents
// (`size` bytes at `bytes`). Pure: no I/O; allocations are bounded by a small
// multiple of the header length (itself <= kSafetensorsMaxHeaderBytes).
// Tensor data pointers point into `bytes`. `file_label` prefixes messages and
// fills SafetensorsTensor::file. Checks: header length fits the file; header
// is a JSON object; "__metadata__" is an object of strings; each tensor has a
// known dtype, a non-negative integer shape whose byte size does not overflow,
// and data_offsets [begin, end] within the buffer whose length matches the
// shape; names are unique; tensors tile the data buffer with no overlap or
// hole (as the reference Rust implementation requires). Unknown fields inside
// a tensor entry are ignored, as the reference implementation does.
StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const uint8_t* bytes, size_t size,
                                                   std::string_view file_label);

// One read-only mapped .safetensors file. Not copyable or movable; tensors and
// their data pointers stay valid while the object lives. Immutable after Open,
// so const methods are safe from any thread. If the file is truncated on disk
// while mapped, touching the lost pages raises SIGBUS (inherent to mmap).
class SafetensorsFile {
 public:
  // mmaps `path` (PROT_READ, MAP_PRIVATE) and validates it. Pages are read
  // lazily by the kernel on first touch.
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return file_->path(); }
  const std::vector<SafetensorsTensor>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // O(log n); nullptr when absent.
  const SafetensorsTensor* Find(std::string_view name) const;
  // Size of the whole file (= bytes mapped).
  uint64_t file_bytes() const { return file_->size(); }

 private:
  SafetensorsFile() = default;

  std::unique_ptr<MappedFile> file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> tensors() position
};

// All tensors of one HF checkpoint directory. Not copyable; immutable after
// Open, so const methods are safe from any thread.
class WeightStore {
 public:
  // Reads <model_dir>/model.safetensors.index.json when present: "weight_map"
  // must be an object mapping tensor name -> shard file name (a plain name in
  // model_dir: no '/', not "." or ".."); every listed tensor must be in its
  // shard; a name listed twice or present in two shards is an error. Without
  // an index, opens <model_dir>/model.safetensors. NotFound if neither exists.
  static StatusOr<std::unique_ptr<WeightStore>> Open(const std::string& model_dir);

  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  const std::string& dir() const { return dir_; }
  // O(log n); nullptr when absent.
  const SafetensorsTensor* Find(std::string_view name) const;
  // Sorted tensor names over all shards.
  std::vector<std::string> Names() const;
  // The tensor, checked to exist (NotFound "<dir>: missing tensor 'X'"), to
  // have exactly `expected_shape` (InvalidArgument "<file>: tensor 'X' has
  // shape [a, b], expected [c, d]") and a float dtype F32/F16/BF16
  // (Unimplemented otherwise, naming the dtype).
  StatusOr<const SafetensorsTensor*> Require(std::string_view name,
                                             std::initializer_list<int64_t> expected_shape) const;
  // Sum of the sizes of all mapped files.
  int64_t total_bytes() const { return total_bytes_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  WeightStore() = default;

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsTensor*, std::less<>> tensors_;
  int64_t total_bytes_ = 0;
};

struct SafetensorsTensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  // Writes exactly numel * DTypeSize(dtype) bytes to dst.
  std::function<void(uint8_t* dst)> fill;
  // Raw bytes: true writes dtype "U8" (1 byte per element; `dtype` is ignored), as
  // HF stores MXFP4 blocks and scales.
  bool u8 = false;
};

// Writes a safetensors file: tensors laid out sorted by name, header padded
// with spaces to a multiple of 8 bytes, "__metadata__" included when
// non-empty. Streams one tensor at a time through a buffer of that tensor's
// size, so memory use is the largest tensor, not the file. Rejects duplicate
// or reserved names and negative dims (InvalidArgument); I/O failures name the
// path. On failure a partially written regular file is removed.
Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata);

}  // namespace tessera
