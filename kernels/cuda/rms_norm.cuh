// RMSNorm on the GPU: out[r, :] = x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * w[:].
// One block per row; the sum of squares is reduced in a fixed tree order, so a
// row's result does not depend on how many rows there are (batch-invariant).
#pragma once

#include <cstdint>

#include "kernels/cuda/compat.cuh"

namespace tessera::kernels::cuda {

// x, w, out are device pointers (f32); out may alias x. Asynchronous on `stream`.
cudaError_t RmsNorm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out,
                    cudaStream_t stream);

// Fused residual add + RMSNorm: residual[r, :] += x[r, :]; out[r, :] = RmsNorm(residual[r, :]).
// residual is updated in place; out must not alias residual or x.
cudaError_t AddRmsNorm(float* residual, const float* x, const float* w, int64_t rows, int64_t dim,
                       float eps, float* out, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
