// Per-expert load of a routing (tokens routed to each expert), for metrics.
#pragma once

#include <cstdint>

#include "kernels/cuda/compat.cuh"

namespace tessera::kernels::cuda {

// counts[e] += number of i < n with topk_ids[i] == e, for e < num_experts
// (ids outside [0, num_experts) are not counted). counts: device int64.
// Integer atomics: the result is exact whatever the order.
cudaError_t MoeCountExperts(const int32_t* topk_ids, int64_t n, int64_t num_experts, int64_t* counts,
                            cudaStream_t stream);

}  // namespace tessera::kernels::cuda
