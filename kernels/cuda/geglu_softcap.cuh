// Gemma's elementwise ops: GeGLU with tanh-GELU, scaling, logit soft-capping.
#pragma once

#include <cstdint>

#include "kernels/cuda/compat.cuh"

namespace tessera::kernels::cuda {

// out[r, i] = gelu_tanh(gate_up[r, i]) * gate_up[r, inter + i]; gate_up [rows, 2*inter],
// out [rows, inter]; gelu_tanh(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3),
// evaluated as the equal x / (1 + exp(-2u)) (as the CPU kernels do).
cudaError_t GeluTanhMul(const float* gate_up, int64_t rows, int64_t inter, float* out, cudaStream_t stream);

// x[i] *= s, i < n.
cudaError_t Scale(float* x, int64_t n, float s, cudaStream_t stream);

// x[i] = cap * tanh(x[i] / cap), i < n.
cudaError_t SoftCap(float* x, int64_t n, float cap, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
