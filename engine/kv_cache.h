// Paged KV cache storage: per layer, K and V for num_blocks blocks of
// block_size tokens. Which request owns which block is the scheduler's business;
// this is only memory. Layout per layer (CPU): [num_blocks, block_size, kv_heads, head_dim] f32.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/model_config.h"

namespace tessera {

class KvCache {
 public:
  // Allocates 2 * layers * num_blocks * block_size * kv_heads * head_dim floats.
  static StatusOr<std::unique_ptr<KvCache>> Create(const ModelConfig& config, Backend* backend,
                                                   int64_t num_blocks, int64_t block_size);
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_slots() const { return num_blocks_ * block_size_; }
  KvLayerView layer(int64_t i) const {
    return {static_cast<float*>(k_[i].get()), static_cast<float*>(v_[i].get())};
  }
  int64_t bytes() const { return bytes_; }

  // Copies K and V of block `src` into block `dst` in every layer (copy-on-write
  // of a shared partial block before a step writes into it). Goes through a
  // host staging buffer, so it works on any backend: O(layers x block bytes).
  Status CopyBlock(int64_t src, int64_t dst);

 private:
  int64_t num_blocks_ = 0;
  int64_t block_size_ = 0;
  int64_t bytes_ = 0;
  int64_t block_bytes_ = 0;     // one block of K (or V) in one layer
  Backend* backend_ = nullptr;  // not owned; outlives the cache
  std::vector<char> staging_;
  std::vector<std::shared_ptr<void>> k_, v_;
};

}  // namespace tessera
