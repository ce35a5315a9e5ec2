#include "kernels/cuda/head_rms_norm.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// One warp per (token, head) vector: lane l sums elements l, l + 32, ... in order,
// then a fixed xor-shuffle tree, so the result depends on head_dim only. Warps
// past the last vector return as a whole (no block-level barrier is used).
__global__ void HeadRmsNormKernel(float* x, int64_t items, int64_t heads, int64_t head_dim,
                                  int64_t x_stride, const float* __restrict__ w, float eps) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (item >= items) return;
  const int lane = threadIdx.x % 32;
  float* v = x + (item / heads) * x_stride + (item % heads) * head_dim;
  float sum = 0.f;
  for (int64_t i = lane; i < head_dim; i += 32) sum += v[i] * v[i];
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const float scale = rsqrtf(sum / static_cast<float>(head_dim) + eps);
  for (int64_t i = lane; i < head_dim; i += 32) v[i] = v[i] * scale * w[i];
}

}  // namespace

cudaError_t HeadRmsNorm(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t x_stride,
                        const float* w, float eps, cudaStream_t stream) {
  const int64_t items = tokens * heads;
  if (items <= 0 || head_dim <= 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>((items + kWarps - 1) / kWarps);
  TESSERA_LAUNCH(grid, kThreads, 0, stream, HeadRmsNormKernel)(x, items, heads, head_dim, x_stride, w, eps);
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
