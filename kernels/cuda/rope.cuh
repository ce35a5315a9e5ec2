// Rotary position embedding from a precomputed cos/sin table, so every scaling
// variant the engine supports (default, linear, dynamic NTK, YaRN, llama3) is
// whatever the host table holds (engine/rope.h).
#pragma once

#include <cstdint>

#include "kernels/cuda/compat.cuh"

namespace tessera::kernels::cuda {

// In place, "rotate half" (GPT-NeoX / HF Llama) convention, same contract as
// kernels::cpu::Rope: x [tokens, heads, head_dim] with row stride x_stride floats;
// the first rot_dim dims of each head rotate; cos_sin [max_pos, rot_dim] holds, for
// position p, cos[0..rot_dim/2) then sin[0..rot_dim/2). Tokens with positions[t] < 0
// (graph padding) are left unchanged.
cudaError_t Rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t x_stride,
                 int64_t rot_dim, const int32_t* positions, const float* cos_sin, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
