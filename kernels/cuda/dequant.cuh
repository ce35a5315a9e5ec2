// Dequantization of GGML block-quantized weights on the device (every format of
// common/quant.h), so a quantized checkpoint travels to the GPU as its raw blocks and
// is widened there instead of element by element on the host.
#pragma once

#include <cstdint>

#include "common/dtype.h"
#include "kernels/cuda/types.cuh"

namespace tessera::kernels::cuda {

// dst[e] = element e of `elems` consecutive elements of quantized `type`, stored as
// raw GGUF blocks at src (a [rows, cols] weight is rows * cols elements: its rows are
// whole blocks, back to back), written as f32 or bf16 (dst_type kF32 / kBF16).
// Exact: each f32 value equals common/quant.cc's DequantizeRow bit for bit, and each
// bf16 value is F32ToBf16 of it (common/dtype.h). src may have any alignment.
// Asynchronous on `stream`, no host synchronisation; cudaErrorInvalidValue for a
// type that is not block-quantized, elems not a multiple of its block, or kF16.
cudaError_t Dequantize(const void* src, DType type, int64_t elems, void* dst, ElemType dst_type,
                       cudaStream_t stream);

}  // namespace tessera::kernels::cuda
