#include "kernels/cuda/convert.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;


// One block per row, threads across columns (coalesced on both sides).
template <typename T>
__global__ void ConvertKernel(const float* __restrict__ src, int64_t ld_src, int64_t cols, T* __restrict__ dst,
                              int64_t ld_dst) {
  const int64_t r = blockIdx.x;
  const float* s = src + r * ld_src;
  T* d = dst + r * ld_dst;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) Store(d + c, s[c]);
}

__global__ void AddBiasKernel(float* y, int64_t ldy, int64_t cols, const float* __restrict__ bias) {
  float* row = y + static_cast<int64_t>(blockIdx.x) * ldy;
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) row[c] += bias[c];
}

}  // namespace

cudaError_t ConvertFromF32(const float* src, int64_t ld_src, int64_t rows, int64_t cols, void* dst,
                           ElemType dst_type, int64_t ld_dst, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>(rows);
  switch (dst_type) {
    case ElemType::kF32:
      TESSERA_LAUNCH(grid, kThreads, 0, stream, ConvertKernel<float>)(src, ld_src, cols,
                                                                       static_cast<float*>(dst), ld_dst);
      break;
    case ElemType::kF16:
      TESSERA_LAUNCH(grid, kThreads, 0, stream, ConvertKernel<__half>)(src, ld_src, cols,
                                                                        static_cast<__half*>(dst), ld_dst);
      break;
    case ElemType::kBF16:
      TESSERA_LAUNCH(grid, kThreads, 0, stream, ConvertKernel<__nv_bfloat16>)(
          src, ld_src, cols, static_cast<__nv_bfloat16*>(dst), ld_dst);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t AddBias(float* y, int64_t ldy, int64_t rows, int64_t cols, const float* bias, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  TESSERA_LAUNCH(static_cast<unsigned>(rows), kThreads, 0, stream, AddBiasKernel)(y, ldy, cols, bias);
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
