#include "kernels/cuda/rms_norm.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Sum over the block in a fixed tree: xor shuffles within each warp, then the
// kWarps partials (every warp does it, identically), so every thread gets the
// same total. `partial` is kWarps floats of shared memory; call once per kernel.
__device__ __forceinline__ float BlockSum(float v, float* partial) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float s = threadIdx.x % 32 < kWarps ? partial[threadIdx.x % 32] : 0.f;
  for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
  return s;
}

// One block per row. Thread t owns the 4-element chunks c = t, t + 256, ... of the
// row (elements 4c..4c+3) in both the vector (float4) and the scalar path, so the
// sum of squares — and so the row's result — is the same whichever path runs:
// it depends on dim only, not on alignment, the row count or the grid.
// kAdd: residual[r] += x[r] first and the norm is of the new residual (written
// back); else the norm is of x. out may alias src when !kAdd (each element is
// read and then written by the same thread).
template <bool kAdd, bool kVec>
__global__ void RmsNormKernel(float* residual, const float* x, const float* __restrict__ w, int64_t dim,
                              float eps, float* out) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * dim;
  float* rr = kAdd ? residual + row * dim : nullptr;
  const float* src = kAdd ? rr : xr;
  float* o = out + row * dim;
  const int64_t chunks = (dim + 3) / 4;
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < chunks; c += kThreads) {
    if (kVec) {  // dim % 4 == 0 and every row 16-byte aligned
      float4 v = reinterpret_cast<const float4*>(xr)[c];
      if (kAdd) {
        const float4 r = reinterpret_cast<const float4*>(rr)[c];
        v = make_float4(r.x + v.x, r.y + v.y, r.z + v.z, r.w + v.w);
        reinterpret_cast<float4*>(rr)[c] = v;
      }
      sum += v.x * v.x;
      sum += v.y * v.y;
      sum += v.z * v.z;
      sum += v.w * v.w;
    } else {
      const int64_t end = 4 * c + 4 < dim ? 4 * c + 4 : dim;
      for (int64_t i = 4 * c; i < end; ++i) {
        float v = xr[i];
        if (kAdd) {
          v = rr[i] + v;
          rr[i] = v;
        }
        sum += v * v;
      }
    }
  }
  __shared__ float partial[kWarps];
  // Every warp reduces the same partials in the same order: one value block-wide.
  const float scale = rsqrtf(BlockSum(sum, partial) / static_cast<float>(dim) + eps);
  // Same element ownership as above: each thread rereads only what it wrote.
  for (int64_t c = threadIdx.x; c < chunks; c += kThreads) {
    if (kVec) {
      const float4 v = reinterpret_cast<const float4*>(src)[c];
      const float4 g = reinterpret_cast<const float4*>(w)[c];
      reinterpret_cast<float4*>(o)[c] =
          make_float4(v.x * scale * g.x, v.y * scale * g.y, v.z * scale * g.z, v.w * scale * g.w);
    } else {
      const int64_t end = 4 * c + 4 < dim ? 4 * c + 4 : dim;
      for (int64_t i = 4 * c; i < end; ++i) o[i] = src[i] * scale * w[i];
    }
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

cudaError_t RmsNorm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out,
                    cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>(rows);
  if (dim % 4 == 0 && Aligned16(x) && Aligned16(w) && Aligned16(out)) {
    TESSERA_LAUNCH(grid, kThreads, 0, stream, RmsNormKernel<false, true>)(nullptr, x, w, dim, eps, out);
  } else {
    TESSERA_LAUNCH(grid, kThreads, 0, stream, RmsNormKernel<false, false>)(nullptr, x, w, dim, eps, out);
  }
  return cudaGetLastError();
}

cudaError_t AddRmsNorm(float* residual, const float* x, const float* w, int64_t rows, int64_t dim,
                       float eps, float* out, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  const unsigned grid = static_cast<unsigned>(rows);
  if (dim % 4 == 0 && Aligned16(residual) && Aligned16(x) && Aligned16(w) && Aligned16(out)) {
    TESSERA_LAUNCH(grid, kThreads, 0, stream, RmsNormKernel<true, true>)(residual, x, w, dim, eps, out);
  } else {
    TESSERA_LAUNCH(grid, kThreads, 0, stream, RmsNormKernel<true, false>)(residual, x, w, dim, eps, out);
  }
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
