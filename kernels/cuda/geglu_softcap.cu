#include "kernels/cuda/geglu_softcap.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float GeluTanhTimes(float x, float u) {
  const float v = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return x / (1.0f + expf(-2.0f * v)) * u;
}

// One thread per output element; elementwise, so rows are independent.
__global__ void GeluTanhMulKernel(const float* __restrict__ gate_up, int64_t rows, int64_t inter,
                                  float* __restrict__ out) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (item >= rows * inter) return;
  const int64_t r = item / inter, c = item % inter;
  const float* g = gate_up + r * 2 * inter;
  out[item] = GeluTanhTimes(g[c], g[inter + c]);
}

__global__ void ScaleKernel(float* x, int64_t n, float s) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) x[i] = x[i] * s;
}

__global__ void SoftCapKernel(float* x, int64_t n, float cap) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

unsigned Grid(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t GeluTanhMul(const float* gate_up, int64_t rows, int64_t inter, float* out, cudaStream_t stream) {
  if (rows <= 0 || inter <= 0) return cudaSuccess;
  TESSERA_LAUNCH(Grid(rows * inter), kThreads, 0, stream, GeluTanhMulKernel)(gate_up, rows, inter, out);
  return cudaGetLastError();
}

cudaError_t Scale(float* x, int64_t n, float s, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  TESSERA_LAUNCH(Grid(n), kThreads, 0, stream, ScaleKernel)(x, n, s);
  return cudaGetLastError();
}

cudaError_t SoftCap(float* x, int64_t n, float cap, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  TESSERA_LAUNCH(Grid(n), kThreads, 0, stream, SoftCapKernel)(x, n, cap);
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
