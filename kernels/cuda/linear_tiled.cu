// Batch-invariant tiled GEMM (see linear_tiled.cuh for the contract).
//
// Each block computes a (16*kR) x (16*kC) tile of y with 256 threads; thread
// (tx, ty) owns rows ty + 16*i (i < kR) and columns tx + 16*j (j < kC), so
// shared-memory reads of w are conflict-free and y stores are coalesced. x and w
// tiles of 32 k are staged through registers into shared memory (w converted to
// f32 exactly on the way), the next tile's global loads in flight while the
// current one is multiplied. Every output is ONE fmaf chain over k = 0, 1, ...,
// k-1 (the tail tile runs only its valid k), plus bias at the end, so its bits
// depend only on x[i, :], w[j, :] and bias[j]: not on m, the tile shape (64x64
// for m > 16, 16x32 for small m, where more blocks matter more than reuse), the
// tile position or the grid.
//
// Expected speed (not measured: the session that wrote it had no GPU): a plain
// SIMT f32 kernel, 16 FMAs per 8 shared loads per thread in the 64x64 variant,
// no tensor cores, no cp.async/TMA. For large m perhaps 10-20% of the f32 FMA
// peak (several TFLOP/s on an H100), far below cuBLAS bf16 tensor-core GEMMs.
// For decode (small m) one thread walks each output's k serially and a layer
// with n = 896 gets only 28 blocks of 16x32 on 132 SMs: latency-bound, maybe a
// few tens of microseconds per GEMM where cuBLAS takes a few. That is the price
// of the single-chain contract; the deterministic mode trades speed for bitwise
// reproducibility.
#include "kernels/cuda/linear_tiled.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kBK = 32;  // k per shared-memory stage
constexpr int kThreads = 256;
constexpr int64_t kMaxGridY = 65535;
constexpr int64_t kSmallM = 16;  // m <= this: the 16x32 tile

__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) { return __bfloat162float(v); }

// kR rows and kC columns of y per thread: a 16*kR x 16*kC tile per block.
template <typename WT, int kR, int kC>
__global__ void __launch_bounds__(kThreads)
    LinearTiledKernel(const float* __restrict__ x, int64_t m, int64_t k, const WT* __restrict__ w, int64_t n,
                      const float* __restrict__ bias, float* __restrict__ y, int64_t ldy) {
  constexpr int kBM = 16 * kR, kBN = 16 * kC;
  constexpr int kXPer = kBM * kBK / kThreads, kWPer = kBN * kBK / kThreads;  // staged per thread
  // [kk][row]: +1 padding so the transposing stores (one row, 32 kk per warp) hit
  // 32 different banks.
  __shared__ float xs[kBK][kBM + 1];
  __shared__ float ws[kBK][kBN + 1];
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kBN;

  // Staging: element e = tid + 256 * r of a tile is (row e / 32, kk e % 32), so a
  // warp reads 32 consecutive k of one row. Out-of-range entries are 0 and never
  // enter a valid output's chain.
  float xr[kXPer], wr[kWPer];
  auto load = [&](int64_t k0) {
    for (int r = 0; r < kXPer; ++r) {
      const int e = tid + kThreads * r;
      const int64_t i = m0 + e / kBK, kg = k0 + e % kBK;
      xr[r] = (i < m && kg < k) ? x[i * k + kg] : 0.f;
    }
    for (int r = 0; r < kWPer; ++r) {
      const int e = tid + kThreads * r;
      const int64_t j = n0 + e / kBK, kg = k0 + e % kBK;
      wr[r] = (j < n && kg < k) ? ToF32(w[j * k + kg]) : 0.f;
    }
  };

  float acc[kR][kC];
  for (int i = 0; i < kR; ++i) {
    for (int j = 0; j < kC; ++j) acc[i][j] = 0.f;
  }
  auto step = [&](int kk) {
    float a[kR], b[kC];
    for (int i = 0; i < kR; ++i) a[i] = xs[kk][ty + 16 * i];
    for (int j = 0; j < kC; ++j) b[j] = ws[kk][tx + 16 * j];
    for (int i = 0; i < kR; ++i) {
      for (int j = 0; j < kC; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
  };

  if (k > 0) load(0);
  for (int64_t k0 = 0; k0 < k; k0 += kBK) {
    for (int r = 0; r < kXPer; ++r) {
      const int e = tid + kThreads * r;
      xs[e % kBK][e / kBK] = xr[r];
    }
    for (int r = 0; r < kWPer; ++r) {
      const int e = tid + kThreads * r;
      ws[e % kBK][e / kBK] = wr[r];
    }
    __syncthreads();
    if (k0 + kBK < k) load(k0 + kBK);  // in flight while this tile is multiplied
    if (k - k0 >= kBK) {
#pragma unroll 8
      for (int kk = 0; kk < kBK; ++kk) step(kk);
    } else {  // the last, partial k tile: the same chain, only its valid k
      const int kt = static_cast<int>(k - k0);
      for (int kk = 0; kk < kt; ++kk) step(kk);
    }
    __syncthreads();
  }

  for (int i = 0; i < kR; ++i) {
    const int64_t row = m0 + ty + 16 * i;
    if (row >= m) continue;
    for (int j = 0; j < kC; ++j) {
      const int64_t col = n0 + tx + 16 * j;
      if (col >= n) continue;
      y[row * ldy + col] = bias != nullptr ? acc[i][j] + bias[col] : acc[i][j];
    }
  }
}

template <typename WT, int kR, int kC>
cudaError_t LaunchTile(const float* x, int64_t m, int64_t k, const void* w, int64_t n, const float* bias,
                       float* y, int64_t ldy, cudaStream_t stream) {
  constexpr int64_t kBM = 16 * kR, kBN = 16 * kC;
  if ((n + kBN - 1) / kBN > kMaxGridY) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>((m + kBM - 1) / kBM), static_cast<unsigned>((n + kBN - 1) / kBN));
  TESSERA_LAUNCH(grid, kThreads, 0, stream, LinearTiledKernel<WT, kR, kC>)(x, m, k, static_cast<const WT*>(w),
                                                                            n, bias, y, ldy);
  return cudaGetLastError();
}

template <typename WT>
cudaError_t Launch(const float* x, int64_t m, int64_t k, const void* w, int64_t n, const float* bias,
                   float* y, int64_t ldy, cudaStream_t stream) {
  return m <= kSmallM ? LaunchTile<WT, 1, 2>(x, m, k, w, n, bias, y, ldy, stream)
                      : LaunchTile<WT, 4, 4>(x, m, k, w, n, bias, y, ldy, stream);
}

}  // namespace

cudaError_t LinearTiled(const float* x, int64_t m, int64_t k, const void* w, ElemType w_type, int64_t n,
                        const float* bias, float* y, int64_t ldy, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  if (k < 0 || ldy < n) return cudaErrorInvalidValue;
  switch (w_type) {
    case ElemType::kF32: return Launch<float>(x, m, k, w, n, bias, y, ldy, stream);
    case ElemType::kF16: return Launch<__half>(x, m, k, w, n, bias, y, ldy, stream);
    case ElemType::kBF16: return Launch<__nv_bfloat16>(x, m, k, w, n, bias, y, ldy, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tessera::kernels::cuda
