#include "engine/kv_cache.h"

#include <string>

namespace tessera {

StatusOr<std::unique_ptr<KvCache>> KvCache::Create(const ModelConfig& c, Backend* backend,
                                                   int64_t num_blocks, int64_t block_size) {
  if (num_blocks <= 0 || block_size <= 0) {
    return InvalidArgument("kv cache: num_blocks and block_size must be positive");
  }
  auto cache = std::unique_ptr<KvCache>(new KvCache());
  cache->num_blocks_ = num_blocks;
  cache->block_size_ = block_size;
  cache->dtype_ = backend->kv_dtype();
  cache->layout_ = MakeKvCacheLayout(c);
  const auto elem = static_cast<int64_t>(DTypeSize(cache->dtype_));
  for (int64_t e : cache->layout_.plane_elems) cache->plane_block_bytes_.push_back(block_size * e * elem);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    for (int64_t b : cache->plane_block_bytes_) {
      ASSIGN_OR_RETURN(auto plane, backend->Allocate(num_blocks * b));
      cache->planes_.push_back(std::move(plane));
      cache->block_bytes_ += b;
      cache->bytes_ += num_blocks * b;
    }
  }
  cache->backend_ = backend;
  return cache;
}

Status KvCache::ReadBlock(int64_t block, std::string* out) const {
  if (block < 0 || block >= num_blocks_) {
    return OutOfRange("kv cache: block " + std::to_string(block) + " outside [0, " + std::to_string(num_blocks_) + ")");
  }
  out->resize(static_cast<size_t>(BlockBytes()));
  char* dst = out->data();
  const size_t n = plane_block_bytes_.size();
  for (size_t i = 0; i < planes_.size(); ++i) {
    const int64_t b = plane_block_bytes_[i % n];
    backend_->CopyToHost(dst, static_cast<const char*>(planes_[i].get()) + block * b, b);
    dst += b;
  }
  return Status::Ok();
}

Status KvCache::WriteBlock(int64_t block, std::string_view bytes) {
  if (block < 0 || block >= num_blocks_) {
    return OutOfRange("kv cache: block " + std::to_string(block) + " outside [0, " + std::to_string(num_blocks_) + ")");
  }
  if (static_cast<int64_t>(bytes.size()) != BlockBytes()) {
    return InvalidArgument("kv cache: block bytes " + std::to_string(bytes.size()) + ", expected " +
                           std::to_string(BlockBytes()));
  }
  const char* src = bytes.data();
  const size_t n = plane_block_bytes_.size();
  for (size_t i = 0; i < planes_.size(); ++i) {
    const int64_t b = plane_block_bytes_[i % n];
    backend_->CopyFromHost(static_cast<char*>(planes_[i].get()) + block * b, src, b);
    src += b;
  }
  return Status::Ok();
}

Status KvCache::CopyBlocks(const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  std::vector<std::pair<int64_t, int64_t>> todo;
  for (const auto& [src, dst] : pairs) {
    if (src < 0 || src >= num_blocks_ || dst < 0 || dst >= num_blocks_) {
      return OutOfRange("kv cache: block copy " + std::to_string(src) + " -> " + std::to_string(dst) +
                        " outside [0, " + std::to_string(num_blocks_) + ")");
    }
    if (src != dst) todo.emplace_back(src, dst);
  }
  for (const auto& [src, dst] : todo) {
    for (const auto& [s2, d2] : todo) {
      if (d2 == src) return InvalidArgument("kv cache: block copies chain through block " + std::to_string(src));
    }
  }
  if (todo.empty()) return Status::Ok();
  // One backend call per plane width (MHA: K and V share it, so one call as before).
  const size_t n = plane_block_bytes_.size();
  for (size_t p = 0; p < n; ++p) {
    bool first = true;
    for (size_t q = 0; q < p; ++q) first &= plane_block_bytes_[q] != plane_block_bytes_[p];
    if (!first) continue;
    std::vector<void*> bases;
    for (size_t i = 0; i < planes_.size(); ++i) {
      if (plane_block_bytes_[i % n] == plane_block_bytes_[p]) bases.push_back(planes_[i].get());
    }
    backend_->CopyBlocks(bases, plane_block_bytes_[p], todo);
  }
  return Status::Ok();
}

}  // namespace tessera
