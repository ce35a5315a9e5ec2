// Gated residual add of the Qwen2-MoE shared expert.
#pragma once

#include <cstdint>

#include "kernels/cuda/compat.cuh"

namespace tessera::kernels::cuda {

// out[r, c] = fmaf(s_r, shared[r, c], out[r, c]) with s_r = 1 / (1 + expf(-gate_logits[r])),
// for r < rows, c < dim (rows of dim f32, contiguous).
cudaError_t SigmoidGateAdd(float* out, const float* shared, const float* gate_logits, int64_t rows, int64_t dim,
                           cudaStream_t stream);

}  // namespace tessera::kernels::cuda
