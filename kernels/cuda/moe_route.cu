// One warp per token. Lane l owns experts l, l + 32, ... (at most 64); the
// token's probabilities live in shared memory, read and written by their owner
// lane only. Max and sum are xor-butterfly reductions, which give every lane the
// same bits (each level adds the same two partials, commutatively), so the sum
// depends on num_experts only. Top-k: k rounds of a warp arg-max over the
// experts not yet taken, ordered by (p descending, id ascending).
#include "kernels/cuda/moe_route.cuh"

#include <cmath>
#include <cstring>

namespace tessera::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr unsigned kFull = 0xffffffffu;

// Whether candidate (v2, i2) ranks before (v1, i1); id -1 is "none".
__device__ __forceinline__ bool Before(float v2, int i2, float v1, int i1) {
  if (i2 < 0) return false;
  if (i1 < 0) return true;
  return v2 > v1 || (v2 == v1 && i2 < i1);
}

__global__ void MoeTopKSoftmaxKernel(const float* __restrict__ logits, int64_t tokens, int experts, int top_k,
                                     bool renormalize, int32_t* __restrict__ ids, float* __restrict__ weights) {
  TESSERA_DYNAMIC_SMEM(float, smem);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (t >= tokens) return;  // whole warp: no block barrier follows
  float* p = smem + warp * experts;
  const float* l = logits + t * experts;

  float mx = -INFINITY;
  for (int e = lane; e < experts; e += 32) mx = fmaxf(mx, l[e]);
  for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, off));
  float sum = 0.f;
  for (int e = lane; e < experts; e += 32) {
    const float v = expf(l[e] - mx);
    p[e] = v;
    sum += v;
  }
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(kFull, sum, off);
  for (int e = lane; e < experts; e += 32) p[e] = p[e] / sum;

  uint64_t taken = 0;  // bit i: expert lane + 32 i already chosen
  int32_t* out_ids = ids + t * top_k;
  float* out_w = weights + t * top_k;
  for (int j = 0; j < top_k; ++j) {
    float best_v = 0.f;
    int best_i = -1;
    for (int e = lane, i = 0; e < experts; e += 32, ++i) {
      if (((taken >> i) & 1u) == 0 && Before(p[e], e, best_v, best_i)) {
        best_v = p[e];
        best_i = e;
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      const float v = __shfl_xor_sync(kFull, best_v, off);
      const int i = __shfl_xor_sync(kFull, best_i, off);
      if (Before(v, i, best_v, best_i)) {
        best_v = v;
        best_i = i;
      }
    }
    // Lane 0's choice for everyone (a NaN logit could make lanes disagree).
    best_v = __shfl_sync(kFull, best_v, 0);
    best_i = __shfl_sync(kFull, best_i, 0);
    if (best_i >= 0 && best_i % 32 == lane) taken |= uint64_t{1} << (best_i / 32);
    if (lane == 0) {
      out_ids[j] = best_i < 0 ? 0 : best_i;
      out_w[j] = best_v;
    }
  }
  if (renormalize && lane == 0) {
    float s = 0.f;
    for (int j = 0; j < top_k; ++j) s += out_w[j];
    for (int j = 0; j < top_k; ++j) out_w[j] = out_w[j] / s;
  }
}

}  // namespace

cudaError_t MoeTopKSoftmax(const float* logits, int64_t tokens, int64_t num_experts, int64_t top_k,
                           bool renormalize, int32_t* topk_ids, float* topk_weights, cudaStream_t stream) {
  if (tokens <= 0) return cudaSuccess;
  if (num_experts < 1 || num_experts > kMoeMaxExperts || top_k < 1 || top_k > num_experts) {
    return cudaErrorInvalidValue;
  }
  const unsigned grid = static_cast<unsigned>((tokens + kWarps - 1) / kWarps);
  const size_t smem = static_cast<size_t>(kWarps * num_experts) * sizeof(float);
  TESSERA_LAUNCH(grid, kWarps * 32, smem, stream, MoeTopKSoftmaxKernel)(
      logits, tokens, static_cast<int>(num_experts), static_cast<int>(top_k), renormalize, topk_ids, topk_weights);
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
