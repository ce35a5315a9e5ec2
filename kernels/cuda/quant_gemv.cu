#include "kernels/cuda/quant_gemv.cuh"

#include <cstddef>

#include "common/quant.h"
#include "kernels/cuda/quant_decode.cuh"

namespace tessera::kernels::cuda {
namespace {

using quant::HalfAt;
using quant::Mul;
using quant::ScaleMin;
using quant::Sub;

constexpr int kWarps = 4;         // weight rows (outputs) per thread block, one per warp
constexpr int kRowsPerPass = 8;   // rows of x accumulated in registers per pass over w

// Lane l's weights 8l .. 8l+7 of a 256-element super-block (so a warp decodes a whole
// block and its reads of the block coalesce), exactly as DequantizeRow computes them.
// Q4_K: all 8 lie in sub-block l / 4, low or high nibbles of 8 consecutive qs bytes.
__device__ __forceinline__ void LaneWeightsQ4K(const uint8_t* b, int lane, float w[8]) {
  const int t = lane / 4;
  int sc, m;
  ScaleMin(b + offsetof(BlockQ4_K, scales), t, &sc, &m);
  const float dl = Mul(HalfAt(b + offsetof(BlockQ4_K, d)), static_cast<float>(sc));
  const float ml = Mul(HalfAt(b + offsetof(BlockQ4_K, dmin)), static_cast<float>(m));
  // 8-byte aligned: blocks are 144 bytes, qs starts at 16, the offset is a multiple of 8.
  const uint2 q = *reinterpret_cast<const uint2*>(b + offsetof(BlockQ4_K, qs) + 32 * (t / 2) + 8 * (lane % 4));
  const int shift = 4 * (t % 2);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const uint32_t byte = ((e < 4 ? q.x : q.y) >> (8 * (e % 4))) & 0xFFu;
    w[e] = Sub(Mul(dl, static_cast<float>((byte >> shift) & 0xFu)), ml);
  }
}
// Q6_K: all 8 lie in sub-block l / 2 (16 elements), in half l / 16 and group (l % 16) / 4.
__device__ __forceinline__ void LaneWeightsQ6K(const uint8_t* b, int lane, float w[8]) {
  const int h = lane / 16, g = (lane % 16) / 4, l0 = 8 * (lane % 4);
  const uint8_t* ql = b + offsetof(BlockQ6_K, ql) + 64 * h + 32 * (g % 2) + l0;
  const uint8_t* qh = b + offsetof(BlockQ6_K, qh) + 32 * h + l0;
  const int shift = g >= 2 ? 4 : 0;
  const int sc = static_cast<int8_t>(b[offsetof(BlockQ6_K, scales) + lane / 2]);
  const float dl = Mul(HalfAt(b + offsetof(BlockQ6_K, d)), static_cast<float>(sc));
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int q = ((ql[e] >> shift) & 0xF) | ((qh[e] >> (2 * g)) & 3) << 4;
    w[e] = Mul(dl, static_cast<float>(q - 32));
  }
}

// One warp per weight row j (output column); lanes split each block 8 columns apiece.
template <bool kQ6K>
__global__ void __launch_bounds__(kWarps * 32)
    QuantGemvKernel(const float* __restrict__ x, int m, int64_t k, const uint8_t* __restrict__ w, int64_t n,
                    const float* __restrict__ bias, float* __restrict__ y, int64_t ldy) {
  constexpr int64_t kBlockBytes = kQ6K ? sizeof(BlockQ6_K) : sizeof(BlockQ4_K);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (j >= n) return;  // whole warps only: the shuffles below see all 32 lanes
  const int64_t blocks = k / 256;
  const uint8_t* row = w + j * blocks * kBlockBytes;
  for (int i0 = 0; i0 < m; i0 += kRowsPerPass) {
    const int rows = m - i0 < kRowsPerPass ? m - i0 : kRowsPerPass;
    float acc[kRowsPerPass];
#pragma unroll
    for (int r = 0; r < kRowsPerPass; ++r) acc[r] = 0.0f;
    for (int64_t kb = 0; kb < blocks; ++kb) {
      float wv[8];
      if constexpr (kQ6K) {
        LaneWeightsQ6K(row + kb * kBlockBytes, lane, wv);
      } else {
        LaneWeightsQ4K(row + kb * kBlockBytes, lane, wv);
      }
      const float* xb = x + static_cast<int64_t>(i0) * k + kb * 256 + 8 * lane;
#pragma unroll
      for (int r = 0; r < kRowsPerPass; ++r) {
        if (r >= rows) break;
        const float4 a = *reinterpret_cast<const float4*>(xb + r * k);
        const float4 c = *reinterpret_cast<const float4*>(xb + r * k + 4);
        float s = acc[r];
        s = fmaf(a.x, wv[0], s);
        s = fmaf(a.y, wv[1], s);
        s = fmaf(a.z, wv[2], s);
        s = fmaf(a.w, wv[3], s);
        s = fmaf(c.x, wv[4], s);
        s = fmaf(c.y, wv[5], s);
        s = fmaf(c.z, wv[6], s);
        acc[r] = fmaf(c.w, wv[7], s);
      }
    }
    for (int r = 0; r < rows; ++r) {
      float v = acc[r];
      for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0) y[static_cast<int64_t>(i0 + r) * ldy + j] = bias != nullptr ? v + bias[j] : v;
    }
  }
}

}  // namespace

cudaError_t QuantGemv(const float* x, int64_t m, int64_t k, const void* w, DType w_type, int64_t n,
                      const float* bias, float* y, int64_t ldy, cudaStream_t stream) {
  if ((w_type != DType::kQ4_K && w_type != DType::kQ6_K) || k % 256 != 0 || m < 0 || n < 0 || m > 0x7fffffff ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0 || reinterpret_cast<uintptr_t>(w) % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  if (m == 0 || n == 0) return cudaSuccess;
  const int64_t grid = (n + kWarps - 1) / kWarps;
  if (grid > 0x7fffffff) return cudaErrorInvalidValue;
  const auto* wb = static_cast<const uint8_t*>(w);
  const int rows = static_cast<int>(m);
  if (w_type == DType::kQ6_K) {
    TESSERA_LAUNCH(static_cast<unsigned>(grid), kWarps * 32, 0, stream, QuantGemvKernel<true>)(x, rows, k, wb, n,
                                                                                                 bias, y, ldy);
  } else {
    TESSERA_LAUNCH(static_cast<unsigned>(grid), kWarps * 32, 0, stream, QuantGemvKernel<false>)(x, rows, k, wb, n,
                                                                                                  bias, y, ldy);
  }
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
