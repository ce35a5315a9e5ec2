// Grouped GEMM of the MoE expert FFN over permuted rows (moe_plan.cuh): every
// row multiplies with its own expert's weights, all experts in one launch, with
// the groups read from the device plan (no host synchronisation).
#pragma once

#include <cstdint>

#include "kernels/cuda/types.cuh"

namespace tessera::kernels::cuda {

// Rows per tile: a block reads its expert's weights once for up to this many rows.
constexpr int64_t kMoeTileRows = 8;

struct MoeGroupedLinearArgs {
  const float* x = nullptr;  // [rows, k] f32, rows grouped by expert (plan)
  int64_t k = 0;
  // Device array [num_experts * parts]: weights[e * parts + p] is [n_part, k] of
  // w_type; output column p * n_part + j is row j of part p (parts = 2 fuses
  // gate and up into one [rows, 2 * n_part] result, the SiluMul layout).
  const void* const* weights = nullptr;
  ElemType w_type = ElemType::kBF16;
  int64_t parts = 1;
  int64_t n_part = 0;
  int64_t num_experts = 0;
  const int32_t* plan = nullptr;  // MoePlan with tile_rows = kMoeTileRows
  int64_t max_tiles = 0;          // MoeMaxTiles(pairs, num_experts, kMoeTileRows): the grid
  // Whether k % 8 == 0 and x and every weight are 16-byte aligned (16-byte
  // loads). The arithmetic is the same either way.
  bool vector_loads = false;
  float* y = nullptr;  // [rows, parts * n_part]
};

// y[r, c] = sum_k x[r, k] * f32(w_e[c, k]) for each permuted row r of expert e.
// Each output is one warp's reduction: lane l sums k = 8l..8l+7, 8l+256.. in
// order with fmaf, then a fixed xor tree. Its bits depend on x[r, :], the weight
// row and k only: not on how many rows the expert has or which (batch invariance).
cudaError_t MoeGroupedLinear(const MoeGroupedLinearArgs& a, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
