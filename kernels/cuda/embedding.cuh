// Token embedding lookup.
#pragma once

#include <cstdint>

#include "kernels/cuda/types.cuh"

namespace tessera::kernels::cuda {

// out[t, :] = f32(table[ids[t], :]); table [vocab, dim] of `type`; ids in range
// (the engine validates them on the host).
cudaError_t Embedding(const void* table, ElemType type, int64_t dim, const int32_t* ids, int64_t n,
                      float* out, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
