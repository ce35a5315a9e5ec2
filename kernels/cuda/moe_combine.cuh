// Un-permutation of the MoE expert FFN: each token's weighted sum of its
// experts' outputs, in slot order.
#pragma once

#include <cstdint>

#include "kernels/cuda/compat.cuh"

namespace tessera::kernels::cuda {

// out[t, c] = sum over j = 0, 1, ..., top_k - 1 (one fmaf chain from 0, in that
// order) of topk_weights[t, j] * y[pair_row[t * top_k + j], c]; slots whose
// pair_row is -1 (MoePlan: an invalid id) add nothing. y [rows, cols] permuted
// rows, out [tokens, cols]. A token's bits depend on its own slots only.
cudaError_t MoeCombine(const float* y, int64_t cols, const int32_t* pair_row, const float* topk_weights,
                       int64_t tokens, int64_t top_k, float* out, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
