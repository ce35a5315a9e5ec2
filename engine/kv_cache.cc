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
  const int64_t per_layer = num_blocks * block_size * TokenBytes(c, cache->dtype_);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    ASSIGN_OR_RETURN(auto k, backend->Allocate(per_layer));
    ASSIGN_OR_RETURN(auto v, backend->Allocate(per_layer));
    cache->k_.push_back(std::move(k));
    cache->v_.push_back(std::move(v));
  }
  cache->bytes_ = 2 * per_layer * c.num_layers;
  cache->block_bytes_ = block_size * TokenBytes(c, cache->dtype_);
  cache->backend_ = backend;
  return cache;
}

int64_t KvCache::TokenBytes(const ModelConfig& c, DType dtype) {
  return c.num_kv_heads * c.head_dim * static_cast<int64_t>(DTypeSize(dtype));
}

Status KvCache::ReadBlock(int64_t block, std::string* out) const {
  if (block < 0 || block >= num_blocks_) {
    return OutOfRange("kv cache: block " + std::to_string(block) + " outside [0, " + std::to_string(num_blocks_) + ")");
  }
  out->resize(static_cast<size_t>(BlockBytes()));
  char* dst = out->data();
  for (size_t l = 0; l < k_.size(); ++l) {
    for (const auto* base : {&k_[l], &v_[l]}) {
      backend_->CopyToHost(dst, static_cast<const char*>(base->get()) + block * block_bytes_, block_bytes_);
      dst += block_bytes_;
    }
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
  for (size_t l = 0; l < k_.size(); ++l) {
    for (auto* base : {&k_[l], &v_[l]}) {
      backend_->CopyFromHost(static_cast<char*>(base->get()) + block * block_bytes_, src, block_bytes_);
      src += block_bytes_;
    }
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
  std::vector<void*> bases;
  for (size_t l = 0; l < k_.size(); ++l) {
    bases.push_back(k_[l].get());
    bases.push_back(v_[l].get());
  }
  backend_->CopyBlocks(bases, block_bytes_, todo);
  return Status::Ok();
}

}  // namespace tessera
