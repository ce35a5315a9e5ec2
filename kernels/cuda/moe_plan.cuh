// Token permutation for the grouped expert FFN: which permuted row each
// (token, slot) pair of a routing takes, rows grouped by expert, and the tiles
// of `tile_rows` rows the grouped GEMM runs over. All on the device, so the
// MoE FFN needs no host synchronisation (CUDA graphs can capture it).
#pragma once

#include <cstdint>

#include "kernels/cuda/compat.cuh"

namespace tessera::kernels::cuda {

// Ints MoePlan writes to `plan`: row offsets [E + 1] then tile offsets [E + 1].
inline int64_t MoePlanInts(int64_t num_experts) { return 2 * (num_experts + 1); }
// Upper bound of the tiles a plan of n pairs has (each active expert adds at
// most one partial tile): the grid size the grouped GEMM launches with.
inline int64_t MoeMaxTiles(int64_t n, int64_t num_experts, int64_t tile_rows) {
  return (n + tile_rows - 1) / tile_rows + (n < num_experts ? n : num_experts);
}

// topk_ids [n] (n = tokens * top_k pairs, pair i = token i / top_k, slot i % top_k).
// Writes plan[e] = first permuted row of expert e (plan[E] = rows routed),
// plan[E + 1 + e] = first tile of expert e (plan[2E + 1] = tiles), and for every
// pair its row pair_row[i] and row_token[pair_row[i]] = i / top_k. Rows of an
// expert are in pair order (stable, deterministic). Ids outside [0, E) take no
// row (pair_row -1), and rows [plan[E], n) get row_token 0. One block; cost
// ~ 2 * E * n / 32 warp steps (ballot scans).
// Needs num_experts <= kMoeMaxExperts (moe_route.cuh).
cudaError_t MoePlan(const int32_t* topk_ids, int64_t n, int64_t top_k, int64_t num_experts, int64_t tile_rows,
                    int32_t* plan, int32_t* pair_row, int32_t* row_token, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
