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
  const int64_t per_layer = num_blocks * block_size * c.num_kv_heads * c.head_dim * 4;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    ASSIGN_OR_RETURN(auto k, backend->Allocate(per_layer));
    ASSIGN_OR_RETURN(auto v, backend->Allocate(per_layer));
    cache->k_.push_back(std::move(k));
    cache->v_.push_back(std::move(v));
  }
  cache->bytes_ = 2 * per_layer * c.num_layers;
  cache->block_bytes_ = block_size * c.num_kv_heads * c.head_dim * 4;
  cache->backend_ = backend;
  return cache;
}

Status KvCache::CopyBlock(int64_t src, int64_t dst) {
  if (src < 0 || src >= num_blocks_ || dst < 0 || dst >= num_blocks_) {
    return OutOfRange("kv cache: block copy " + std::to_string(src) + " -> " + std::to_string(dst) +
                      " outside [0, " + std::to_string(num_blocks_) + ")");
  }
  if (src == dst) return Status::Ok();
  staging_.resize(static_cast<size_t>(block_bytes_));
  for (const auto* side : {&k_, &v_}) {
    for (const auto& layer : *side) {
      char* base = static_cast<char*>(layer.get());
      backend_->CopyToHost(staging_.data(), base + src * block_bytes_, block_bytes_);
      backend_->CopyFromHost(base + dst * block_bytes_, staging_.data(), block_bytes_);
    }
  }
  return Status::Ok();
}

}  // namespace tessera
