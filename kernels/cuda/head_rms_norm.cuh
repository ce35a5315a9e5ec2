// Per-head RMSNorm in place (Qwen3 q/k norm) on strided rows.
#pragma once

#include <cstdint>

#include "kernels/cuda/compat.cuh"

namespace tessera::kernels::cuda {

// x: [tokens, heads, head_dim] f32 with x_stride floats between tokens; each
// (token, head) vector is normalised over head_dim and scaled by w[head_dim].
// Fixed-order reduction per vector (batch-invariant).
cudaError_t HeadRmsNorm(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t x_stride,
                        const float* w, float eps, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
