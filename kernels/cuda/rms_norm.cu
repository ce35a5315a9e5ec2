#include "kernels/cuda/rms_norm.cuh"


namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void RmsNormKernel(const float* __restrict__ x, const float* __restrict__ w, int64_t dim,
                              float eps, float* out) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * dim;
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) sum += xr[i] * xr[i];
  // Fixed-order tree: warp shuffles, then the first warp over warp partials.
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  __shared__ float partial[kThreads / 32];
  __shared__ float scale;
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < kThreads / 32 ? partial[threadIdx.x] : 0.f;
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (threadIdx.x == 0) scale = rsqrtf(s / static_cast<float>(dim) + eps);
  }
  __syncthreads();
  float* o = out + row * dim;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) o[i] = xr[i] * scale * w[i];
}

}  // namespace

cudaError_t RmsNorm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out,
                    cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  TESSERA_LAUNCH(static_cast<unsigned>(rows), kThreads, 0, stream, RmsNormKernel)(x, w, dim, eps, out);
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
