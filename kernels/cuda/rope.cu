#include "kernels/cuda/rope.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per (token, head, i < rot_dim / 2) pair, flattened with i fastest so
// a warp reads consecutive x[i] / x[i + half] and table entries. Each pair is
// independent: the value never depends on the launch shape.
__global__ void RopeKernel(float* x, int64_t items, int64_t heads, int64_t head_dim, int64_t x_stride,
                           int64_t rot_dim, const int32_t* __restrict__ positions,
                           const float* __restrict__ cos_sin) {
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (item >= items) return;
  const int64_t half = rot_dim / 2;
  const int64_t i = item % half;
  const int64_t th = item / half;
  const int64_t t = th / heads, h = th % heads;
  const int32_t pos = positions[t];
  if (pos < 0) return;  // graph padding: left unchanged
  const float* c = cos_sin + static_cast<int64_t>(pos) * rot_dim;
  float* xh = x + t * x_stride + h * head_dim;
  const float x1 = xh[i], x2 = xh[i + half];
  const float cs = c[i], sn = c[half + i];
  xh[i] = x1 * cs - x2 * sn;
  xh[i + half] = x2 * cs + x1 * sn;
}

}  // namespace

cudaError_t Rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t x_stride,
                 int64_t rot_dim, const int32_t* positions, const float* cos_sin, cudaStream_t stream) {
  const int64_t items = tokens * heads * (rot_dim / 2);
  if (items <= 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>((items + kThreads - 1) / kThreads);
  TESSERA_LAUNCH(grid, kThreads, 0, stream, RopeKernel)(x, items, heads, head_dim, x_stride, rot_dim,
                                                         positions, cos_sin);
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
