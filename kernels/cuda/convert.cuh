// Element conversions and bias add around the GEMMs (activations are f32 between
// ops; cuBLAS reads them as bf16/f16 to match the weights).
#pragma once

#include <cstdint>

#include "kernels/cuda/types.cuh"

namespace tessera::kernels::cuda {

// dst[r * ld_dst + c] = convert(src[r * ld_src + c]) for r < rows, c < cols;
// src f32, dst of dst_type (round to nearest even).
cudaError_t ConvertFromF32(const float* src, int64_t ld_src, int64_t rows, int64_t cols, void* dst,
                           ElemType dst_type, int64_t ld_dst, cudaStream_t stream);

// y[r * ldy + c] += bias[c] for r < rows, c < cols.
cudaError_t AddBias(float* y, int64_t ldy, int64_t rows, int64_t cols, const float* bias,
                    cudaStream_t stream);

}  // namespace tessera::kernels::cuda
