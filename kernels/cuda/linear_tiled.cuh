// Batch-invariant Linear without cuBLAS: the deterministic mode's GEMM.
// cuBLAS picks algorithms (split-K, tile shapes) by problem size, so a row's
// result can change with the batch size; this kernel reduces every output
// element over k in one fixed order (ascending k, one f32 FMA chain), whatever m is.
#pragma once

#include <cstdint>

#include "kernels/cuda/types.cuh"

namespace tessera::kernels::cuda {

// y[i, j] = sum_k x[i, k] * f32(w[j, k]) + (bias ? bias[j] : 0);
// x [m, k] f32 (row stride k), w [n, k] of w_type, y [m, n] with row stride ldy.
// For every (i, j) the sum is the same FMA chain for k = 0, 1, ... in order, so
// the result equals the CPU reference computed the same way up to FMA contraction.
cudaError_t LinearTiled(const float* x, int64_t m, int64_t k, const void* w, ElemType w_type, int64_t n,
                        const float* bias, float* y, int64_t ldy, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
