// A block = 8 warps x one tile of up to kMoeTileRows rows of one expert; warp w
// computes output column blockIdx.y * 8 + w for every row of the tile, so the
// weight row streams once per tile (decode: once per step for all the expert's
// tokens) while the tile's x rows come from L1. Expected speed (not measured):
// decode is weight-bandwidth bound, like a GEMV with 8 rows; large prefill
// batches re-read the weights once per 8 rows and run on CUDA cores, so the
// cuBLAS mode sends them to cuBLAS instead (engine/cuda/cuda_moe.cc).
#include "kernels/cuda/moe_grouped_linear.cuh"

#include <cstring>

namespace tessera::kernels::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kV = 8;  // k elements per lane per step
constexpr int64_t kStep = 32 * kV;
constexpr int kR = static_cast<int>(kMoeTileRows);
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) { return __bfloat162float(v); }

// 8 consecutive elements at p (16-byte aligned), widened to f32 exactly.
template <typename T>
__device__ __forceinline__ void Load8(const T* p, float out[kV]) {
  if constexpr (sizeof(T) == 4) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    T h[kV];
    memcpy(h, &u, sizeof(h));
    for (int i = 0; i < kV; ++i) out[i] = ToF32(h[i]);
  }
}

template <typename WT, bool kVec>
__global__ void __launch_bounds__(kWarps * 32)
    MoeGroupedLinearKernel(const float* __restrict__ x, int64_t k, const void* const* __restrict__ weights,
                           int64_t parts, int64_t n_part, int experts, const int32_t* __restrict__ plan,
                           float* __restrict__ y) {
  const int64_t tile = blockIdx.x;
  const int32_t* row_start = plan;
  const int32_t* tile_start = plan + experts + 1;
  if (tile >= tile_start[experts]) return;  // whole block; no barriers below
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t n = parts * n_part;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * kWarps + warp;
  if (col >= n) return;  // whole warp
  // The expert owning this tile: the last e with tile_start[e] <= tile.
  int lo = 0, hi = experts;  // tile_start[lo] <= tile < tile_start[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (tile_start[mid] <= tile) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int e = lo;
  const int64_t row0 = row_start[e] + (tile - tile_start[e]) * kMoeTileRows;
  const int64_t rows_left = row_start[e + 1] - row0;
  const int rows = rows_left < kR ? static_cast<int>(rows_left) : kR;
  const int64_t part = col / n_part;
  const WT* w = static_cast<const WT*>(weights[e * parts + part]) + (col - part * n_part) * k;
  const float* xt = x + row0 * k;

  float acc[kR];
#pragma unroll
  for (int r = 0; r < kR; ++r) acc[r] = 0.f;
  for (int64_t k0 = lane * kV; k0 < k; k0 += kStep) {
    float wv[kV];
    if (kVec) {
      Load8(w + k0, wv);
    } else {
      for (int i = 0; i < kV; ++i) wv[i] = k0 + i < k ? ToF32(w[k0 + i]) : 0.f;
    }
    // (No early exit from unrolled loops: clang then refuses to unroll them.)
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      if (r < rows) {
        const float* xr = xt + r * k + k0;
        if (kVec) {
          float xv[kV];
          Load8(xr, xv);
          for (int i = 0; i < kV; ++i) acc[r] = fmaf(xv[i], wv[i], acc[r]);
        } else {
          for (int i = 0; i < kV; ++i) {
            if (k0 + i < k) acc[r] = fmaf(xr[i], wv[i], acc[r]);
          }
        }
      }
    }
  }
  for (int r = 0; r < rows; ++r) {
    float v = acc[r];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFull, v, off);
    if (lane == 0) y[(row0 + r) * n + col] = v;
  }
}

template <typename WT>
cudaError_t Launch(const MoeGroupedLinearArgs& a, cudaStream_t stream) {
  const int64_t n = a.parts * a.n_part;
  const dim3 grid(static_cast<unsigned>(a.max_tiles), static_cast<unsigned>((n + kWarps - 1) / kWarps));
  const int experts = static_cast<int>(a.num_experts);
  if (a.vector_loads) {
    TESSERA_LAUNCH(grid, kWarps * 32, 0, stream, MoeGroupedLinearKernel<WT, true>)(
        a.x, a.k, a.weights, a.parts, a.n_part, experts, a.plan, a.y);
  } else {
    TESSERA_LAUNCH(grid, kWarps * 32, 0, stream, MoeGroupedLinearKernel<WT, false>)(
        a.x, a.k, a.weights, a.parts, a.n_part, experts, a.plan, a.y);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t MoeGroupedLinear(const MoeGroupedLinearArgs& a, cudaStream_t stream) {
  if (a.max_tiles <= 0 || a.n_part <= 0) return cudaSuccess;
  if (a.k <= 0 || a.parts < 1 || a.num_experts < 1 || a.max_tiles > 0x7fffffff ||
      (a.parts * a.n_part + kWarps - 1) / kWarps > 65535 || (a.vector_loads && a.k % kV != 0)) {
    return cudaErrorInvalidValue;
  }
  switch (a.w_type) {
    case ElemType::kF32: return Launch<float>(a, stream);
    case ElemType::kF16: return Launch<__half>(a, stream);
    case ElemType::kBF16: return Launch<__nv_bfloat16>(a, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tessera::kernels::cuda
