// One block of 1024 threads. Warp w handles experts w, w + 32, ...: it scans
// the ids 32 at a time with a ballot, once to count and once (after one thread
// has turned counts into offsets) to place each pair at offset + its rank among
// the earlier pairs of that expert.
#include "kernels/cuda/moe_plan.cuh"

#include "kernels/cuda/moe_route.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

__global__ void MoePlanKernel(const int32_t* __restrict__ ids, int64_t n, int64_t top_k, int experts,
                              int64_t tile_rows, int32_t* __restrict__ plan, int32_t* __restrict__ pair_row,
                              int32_t* __restrict__ row_token) {
  TESSERA_DYNAMIC_SMEM(int32_t, offset);  // [experts]: counts, then first rows
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const unsigned below = (1u << lane) - 1u;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    if (ids[i] < 0 || ids[i] >= experts) pair_row[i] = -1;
  }
  for (int e = warp; e < experts; e += kWarps) {
    int32_t count = 0;
    for (int64_t base = 0; base < n; base += 32) {
      const int64_t i = base + lane;
      count += __popc(__ballot_sync(kFull, i < n && ids[i] == e));
    }
    if (lane == 0) offset[e] = count;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t row = 0, tile = 0;
    for (int e = 0; e < experts; ++e) {
      const int32_t count = offset[e];
      offset[e] = row;
      plan[e] = row;
      plan[experts + 1 + e] = tile;
      row += count;
      tile += static_cast<int32_t>((count + tile_rows - 1) / tile_rows);
    }
    plan[experts] = row;
    plan[2 * experts + 1] = tile;
  }
  __syncthreads();
  // Rows past the routed ones (invalid ids) gather token 0 and are never read.
  for (int64_t r = plan[experts] + threadIdx.x; r < n; r += kThreads) row_token[r] = 0;
  for (int e = warp; e < experts; e += kWarps) {
    int32_t pos = offset[e];
    for (int64_t base = 0; base < n; base += 32) {
      const int64_t i = base + lane;
      const bool hit = i < n && ids[i] == e;
      const unsigned mask = __ballot_sync(kFull, hit);
      if (hit) {
        const int32_t r = pos + __popc(mask & below);
        pair_row[i] = r;
        row_token[r] = static_cast<int32_t>(i / top_k);
      }
      pos += __popc(mask);
    }
  }
}

}  // namespace

cudaError_t MoePlan(const int32_t* topk_ids, int64_t n, int64_t top_k, int64_t num_experts, int64_t tile_rows,
                    int32_t* plan, int32_t* pair_row, int32_t* row_token, cudaStream_t stream) {
  if (num_experts < 1 || num_experts > kMoeMaxExperts || top_k < 1 || tile_rows < 1 || n < 0 ||
      n > int64_t{0x7fffffff}) {
    return cudaErrorInvalidValue;
  }
  const size_t smem = static_cast<size_t>(num_experts) * sizeof(int32_t);
  TESSERA_LAUNCH(1, kThreads, smem, stream, MoePlanKernel)(topk_ids, n, top_k, static_cast<int>(num_experts),
                                                          tile_rows, plan, pair_row, row_token);
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
