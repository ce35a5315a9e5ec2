// A whole regular file mapped read-only (PROT_READ, MAP_PRIVATE): the one place
// that opens and maps weight files (safetensors, GGUF). Pages are read lazily on
// first touch; if the file is truncated on disk while mapped, touching the lost
// pages raises SIGBUS (inherent to mmap). Immutable: const methods are
// thread-safe. Owns the mapping.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace tessera {

class MappedFile {
 public:
  // NotFound when the path (or a directory on it) does not exist,
  // FailedPrecondition when it cannot be opened or stat'ed, InvalidArgument
  // when it is not a regular file, ResourceExhausted when mmap fails. Every
  // message starts with the path.
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  // nullptr for an empty file.
  const uint8_t* data() const { return static_cast<const uint8_t*>(map_); }
  uint64_t size() const { return size_; }

 private:
  MappedFile() = default;
  std::string path_;
  void* map_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace tessera
