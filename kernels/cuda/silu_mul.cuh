// SwiGLU activation.
#pragma once

#include <cstdint>

#include "kernels/cuda/compat.cuh"

namespace tessera::kernels::cuda {

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i]; gate_up [rows, 2*inter],
// out [rows, inter]; silu(g) = g / (1 + exp(-g)).
cudaError_t SiluMul(const float* gate_up, int64_t rows, int64_t inter, float* out, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
