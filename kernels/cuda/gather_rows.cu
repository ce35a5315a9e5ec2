#include "kernels/cuda/gather_rows.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// One block per gathered row; kVec: float4 copies (cols % 4 == 0, both bases
// 16-byte aligned). A copy: the vector width changes no value.
template <bool kVec>
__global__ void GatherRowsKernel(const float* __restrict__ src, int64_t cols, const int32_t* __restrict__ indices,
                                 float* __restrict__ dst) {
  const int64_t r = blockIdx.x;
  const float* s = src + static_cast<int64_t>(indices[r]) * cols;
  float* d = dst + r * cols;
  if (kVec) {
    for (int64_t c = threadIdx.x; c < cols / 4; c += kThreads) {
      reinterpret_cast<float4*>(d)[c] = reinterpret_cast<const float4*>(s)[c];
    }
  } else {
    for (int64_t c = threadIdx.x; c < cols; c += kThreads) d[c] = s[c];
  }
}

}  // namespace

cudaError_t GatherRows(const float* src, int64_t cols, const int32_t* indices, int64_t n, float* dst,
                       cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>(n);
  if (cols % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    TESSERA_LAUNCH(grid, kThreads, 0, stream, GatherRowsKernel<true>)(src, cols, indices, dst);
  } else {
    TESSERA_LAUNCH(grid, kThreads, 0, stream, GatherRowsKernel<false>)(src, cols, indices, dst);
  }
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
