// Row gather (hidden states of the rows whose logits are wanted).
#pragma once

#include <cstdint>

#include "kernels/cuda/compat.cuh"

namespace tessera::kernels::cuda {

// dst[i, :] = src[indices[i], :] for i < n; rows of `cols` f32.
cudaError_t GatherRows(const float* src, int64_t cols, const int32_t* indices, int64_t n, float* dst,
                       cudaStream_t stream);

}  // namespace tessera::kernels::cuda
