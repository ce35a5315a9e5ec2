#include "kernels/cuda/moe_combine.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// One block per token; each thread owns columns c = threadIdx.x + 256 i.
__global__ void MoeCombineKernel(const float* __restrict__ y, int64_t cols, const int32_t* __restrict__ pair_row,
                                 const float* __restrict__ weights, int64_t top_k, float* __restrict__ out) {
  const int64_t t = blockIdx.x;
  const int32_t* rows = pair_row + t * top_k;
  const float* w = weights + t * top_k;
  float* o = out + t * cols;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    float acc = 0.f;
    for (int64_t j = 0; j < top_k; ++j) {
      if (rows[j] >= 0) acc = fmaf(w[j], y[static_cast<int64_t>(rows[j]) * cols + c], acc);
    }
    o[c] = acc;
  }
}

}  // namespace

cudaError_t MoeCombine(const float* y, int64_t cols, const int32_t* pair_row, const float* topk_weights,
                       int64_t tokens, int64_t top_k, float* out, cudaStream_t stream) {
  if (tokens <= 0 || cols <= 0) return cudaSuccess;
  if (top_k < 1 || tokens > 0x7fffffff) return cudaErrorInvalidValue;
  TESSERA_LAUNCH(static_cast<unsigned>(tokens), kThreads, 0, stream, MoeCombineKernel)(y, cols, pair_row,
                                                                                       topk_weights, top_k, out);
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
