#include "kernels/cuda/moe_count.cuh"

#include <algorithm>

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 256;
constexpr int64_t kSmemExperts = 4096;  // more experts: global atomics only

// Grid-stride over the ids; with a shared histogram (kShared) each block adds
// its non-zero bins to counts once.
template <bool kShared>
__global__ void MoeCountKernel(const int32_t* __restrict__ ids, int64_t n, int experts,
                               unsigned long long* __restrict__ counts) {
  TESSERA_DYNAMIC_SMEM(unsigned, bins);
  if (kShared) {
    for (int e = threadIdx.x; e < experts; e += kThreads) bins[e] = 0;
    __syncthreads();
  }
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int32_t e = ids[i];
    if (e < 0 || e >= experts) continue;
    if (kShared) {
      atomicAdd(&bins[e], 1u);
    } else {
      atomicAdd(&counts[e], 1ull);
    }
  }
  if (kShared) {
    __syncthreads();
    for (int e = threadIdx.x; e < experts; e += kThreads) {
      if (bins[e] != 0) atomicAdd(&counts[e], static_cast<unsigned long long>(bins[e]));
    }
  }
}

}  // namespace

cudaError_t MoeCountExperts(const int32_t* topk_ids, int64_t n, int64_t num_experts, int64_t* counts,
                            cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (num_experts < 1 || num_experts > 0x7fffffff) return cudaErrorInvalidValue;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks);
  auto* c = reinterpret_cast<unsigned long long*>(counts);  // two's complement: the same bits
  const int experts = static_cast<int>(num_experts);
  if (num_experts <= kSmemExperts) {
    const size_t smem = static_cast<size_t>(num_experts) * sizeof(unsigned);
    TESSERA_LAUNCH(static_cast<unsigned>(blocks), kThreads, smem, stream, MoeCountKernel<true>)(topk_ids, n,
                                                                                               experts, c);
  } else {
    TESSERA_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, stream, MoeCountKernel<false>)(topk_ids, n, experts,
                                                                                             c);
  }
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
