#include "kernels/cuda/silu_mul.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float SiluTimes(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// kVec: one thread per 4 consecutive outputs (inter % 4 == 0, both pointers
// 16-byte aligned); else one per output. Same per-element arithmetic either way.
template <bool kVec>
__global__ void SiluMulKernel(const float* __restrict__ gate_up, int64_t rows, int64_t inter,
                              float* __restrict__ out) {
  constexpr int kPer = kVec ? 4 : 1;
  const int64_t per_row = inter / kPer;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (item >= rows * per_row) return;
  const int64_t r = item / per_row, c = item % per_row;
  const float* g = gate_up + r * 2 * inter;
  if (kVec) {
    const float4 a = reinterpret_cast<const float4*>(g)[c];
    const float4 b = reinterpret_cast<const float4*>(g + inter)[c];
    reinterpret_cast<float4*>(out + r * inter)[c] =
        make_float4(SiluTimes(a.x, b.x), SiluTimes(a.y, b.y), SiluTimes(a.z, b.z), SiluTimes(a.w, b.w));
  } else {
    out[r * inter + c] = SiluTimes(g[c], g[inter + c]);
  }
}

}  // namespace

cudaError_t SiluMul(const float* gate_up, int64_t rows, int64_t inter, float* out, cudaStream_t stream) {
  if (rows <= 0 || inter <= 0) return cudaSuccess;
  const bool vec = inter % 4 == 0 && reinterpret_cast<uintptr_t>(gate_up) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int64_t items = rows * (vec ? inter / 4 : inter);
  const unsigned grid = static_cast<unsigned>((items + kThreads - 1) / kThreads);
  if (vec) {
    TESSERA_LAUNCH(grid, kThreads, 0, stream, SiluMulKernel<true>)(gate_up, rows, inter, out);
  } else {
    TESSERA_LAUNCH(grid, kThreads, 0, stream, SiluMulKernel<false>)(gate_up, rows, inter, out);
  }
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
