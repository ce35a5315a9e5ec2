#include "tests/cuda/selftest_kernels.cuh"

namespace tessera::cuda_test {
namespace {

__global__ void BlockSumKernel(const float* in, float* out) {
  __shared__ float s[256];
  s[threadIdx.x] = in[blockIdx.x * 256 + threadIdx.x];
  __syncthreads();
  for (int stride = 128; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

__global__ void WarpOpsKernel(int* out) {
  const int t = threadIdx.x, lane = t % 32;
  const int v = t * 10;
  out[t * 5 + 0] = __shfl_xor_sync(0xffffffffu, v, 5);
  out[t * 5 + 1] = __shfl_down_sync(0xffffffffu, v, 3);
  out[t * 5 + 2] = __shfl_up_sync(0xffffffffu, v, 2);
  out[t * 5 + 3] = __shfl_sync(0xffffffffu, v, 7);
  out[t * 5 + 4] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 2 == 1));
}

__global__ void AtomicCountKernel(int* counter) { atomicAdd(counter, 1); }

__global__ void AffineKernel(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 2.0f + 1.0f;
}

__global__ void ManyBarriersKernel(float* out, int rounds) {
  __shared__ float s[128];
  float acc = 0.f;
  for (int r = 0; r < rounds; ++r) {
    s[threadIdx.x] = static_cast<float>(r + threadIdx.x);
    __syncthreads();
    acc += s[(threadIdx.x + 1) % 128];
    __syncthreads();
  }
  out[threadIdx.x] = acc;
}

}  // namespace

cudaError_t BlockSum(const float* in, int blocks, float* out, cudaStream_t stream) {
  TESSERA_LAUNCH(blocks, 256, 0, stream, BlockSumKernel)(in, out);
  return cudaGetLastError();
}
cudaError_t WarpOps(int* out, cudaStream_t stream) {
  TESSERA_LAUNCH(1, 64, 0, stream, WarpOpsKernel)(out);
  return cudaGetLastError();
}
cudaError_t AtomicCount(int* counter, int blocks, cudaStream_t stream) {
  TESSERA_LAUNCH(blocks, 128, 0, stream, AtomicCountKernel)(counter);
  return cudaGetLastError();
}
cudaError_t Affine(float* x, int n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  TESSERA_LAUNCH((n + 127) / 128, 128, 0, stream, AffineKernel)(x, n);
  return cudaGetLastError();
}
cudaError_t ManyBarriers(float* out, int rounds, cudaStream_t stream) {
  TESSERA_LAUNCH(1, 128, 0, stream, ManyBarriersKernel)(out, rounds);
  return cudaGetLastError();
}

}  // namespace tessera::cuda_test
