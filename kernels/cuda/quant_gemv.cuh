// A fused dequantize-and-multiply for decode-sized batches: the quantized weight is
// read once and decoded in registers, never written out as bf16. Not wired into the
// backend: whether it beats cuBLAS on the bf16 weight has to be measured on a GPU
// first (tessera-cuda-bench, section "quant").
#pragma once

#include <cstdint>

#include "common/dtype.h"
#include "kernels/cuda/types.cuh"

namespace tessera::kernels::cuda {

// y[i * ldy + j] = sum_c x[i * k + c] * w[j, c] (+ bias[j]) for i < m, j < n; w [n, k]
// as raw Q4_K or Q6_K blocks (k a multiple of 256, rows back to back), x f32 and
// 16-byte aligned, w 8-byte aligned. Weights take DequantizeRow's exact f32 values.
// Batch-invariant: every y[i, j] is one fixed sum (each lane's 8 columns per block
// in ascending order as an f32 FMA chain over the blocks, then a fixed butterfly over
// the warp's 32 lanes), whatever m, n or the other rows. Cost: one warp per output
// column j reads w's row once per 8 rows of x. cudaErrorInvalidValue for another
// type, a k that is not a multiple of 256 or a misaligned x or w.
cudaError_t QuantGemv(const float* x, int64_t m, int64_t k, const void* w, DType w_type, int64_t n,
                      const float* bias, float* y, int64_t ldy, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
