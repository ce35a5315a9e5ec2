// Mixture-of-experts routing: softmax over each token's router logits, then its
// top-k experts (engine/backend.h, Backend::MoeRoute, is the contract).
#pragma once

#include <cstdint>

#include "kernels/cuda/compat.cuh"

namespace tessera::kernels::cuda {

// Most experts a routing call handles (the probabilities of a token sit in
// shared memory; 64 per lane).
constexpr int64_t kMoeMaxExperts = 2048;

// Per token t: p = softmax(logits[t, :num_experts]) in f32; topk_ids[t, j] and
// topk_weights[t, j] for j < top_k are the experts by descending p, ties to the
// lower expert id; with `renormalize` the k weights are divided by their sum
// (added in slot order). A token's result depends on its own logits only.
// Needs 1 <= top_k <= num_experts <= kMoeMaxExperts.
cudaError_t MoeTopKSoftmax(const float* logits, int64_t tokens, int64_t num_experts, int64_t top_k,
                           bool renormalize, int32_t* topk_ids, float* topk_weights, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
