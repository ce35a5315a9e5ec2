// Writes new K/V rows into the paged cache through the slot mapping.
#pragma once

#include <cstdint>

#include "kernels/cuda/types.cuh"

namespace tessera::kernels::cuda {

// Cache layout per layer: [num_blocks, block_size, kv_heads, head_dim] of cache_type.
// Token t's k/v rows (k + t * k_stride, v + t * v_stride; kv_heads * head_dim f32)
// go to slot slot_mapping[t] (= block * block_size + offset); slot < 0 skips.
cudaError_t WriteKv(const float* k, int64_t k_stride, const float* v, int64_t v_stride, int64_t tokens,
                    int64_t kv_heads, int64_t head_dim, const int64_t* slot_mapping, void* k_cache,
                    void* v_cache, ElemType cache_type, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
