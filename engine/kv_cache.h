// Paged KV cache storage: per layer, the planes of engine/kv_layout.h (MHA: K and
// V; MLA: one latent plane) for num_blocks blocks of block_size tokens. Which
// request owns which block is the scheduler's business; this is only memory.
// Layout per plane: [num_blocks, block_size, plane elems] of the backend's
// kv_dtype() (f32 on the CPU, bf16 on CUDA).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/backend.h"
#include "engine/kv_layout.h"
#include "engine/model_config.h"

namespace tessera {

class KvCache {
 public:
  // Allocates layers * num_blocks * block_size * layout.ElemsPerToken() elements.
  static StatusOr<std::unique_ptr<KvCache>> Create(const ModelConfig& config, Backend* backend,
                                                   int64_t num_blocks, int64_t block_size);
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_slots() const { return num_blocks_ * block_size_; }
  // MLA: v == k (V is the leading kv_lora_rank values of each latent row).
  KvLayerView layer(int64_t i) const {
    const size_t p = static_cast<size_t>(i) * layout_.plane_elems.size();
    return {planes_[p].get(), planes_[layout_.v_aliases_k ? p : p + 1].get(), dtype_};
  }
  const KvCacheLayout& layout() const { return layout_; }
  int64_t bytes() const { return bytes_; }

  // Copies K and V of block `src` into block `dst` in every layer (copy-on-write
  // of a shared partial block before a step writes into it), on the device:
  // O(layers x block bytes).
  Status CopyBlock(int64_t src, int64_t dst) { return CopyBlocks({{src, dst}}); }
  // Several (src, dst) pairs in one backend call; pairs must not chain.
  Status CopyBlocks(const std::vector<std::pair<int64_t, int64_t>>& pairs);
  // One block of every plane of every layer as one byte string (layer 0 K, layer
  // 0 V, layer 1 K, ...; MLA: layer 0 latent, layer 1 latent, ...): what the KV tiers store (runtime/kv_connectors/tier_connector.h). Device
  // to host / host to device copies, O(BlockBytes()); the caller must not run
  // a step on the block meanwhile. OUT_OF_RANGE for a bad block, INVALID_ARGUMENT
  // for bytes of another size.
  int64_t BlockBytes() const { return block_bytes_; }
  Status ReadBlock(int64_t block, std::string* out) const;
  Status WriteBlock(int64_t block, std::string_view bytes);

 private:
  int64_t num_blocks_ = 0;
  int64_t block_size_ = 0;
  int64_t bytes_ = 0;
  int64_t block_bytes_ = 0;     // one block of every plane of every layer
  KvCacheLayout layout_;
  std::vector<int64_t> plane_block_bytes_;  // one block of each plane
  DType dtype_ = DType::kF32;
  Backend* backend_ = nullptr;  // not owned; outlives the cache
  // Layer-major: layer l, plane p at l * planes + p.
  std::vector<std::shared_ptr<void>> planes_;
};

}  // namespace tessera
