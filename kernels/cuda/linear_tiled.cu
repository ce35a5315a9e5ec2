// Batch-invariant tiled GEMM (see linear_tiled.cuh for the contract).
//
// Each block computes a 64x64 tile of y with 256 threads; thread (tx, ty) owns
// rows ty + 16*i and columns tx + 16*j (i, j < 4), so shared-memory reads of w
// are conflict-free and y stores are coalesced. x and w tiles of 32 k are staged
// in shared memory (w converted to f32 exactly on the way in). Every output is
// ONE fmaf chain over k = 0, 1, ..., k-1 (the tail tile runs only its valid k),
// plus bias at the end, so its bits depend only on x[i, :], w[j, :] and bias[j]:
// not on m, the tile position, or the grid.
//
// Expected speed (not measured here; no GPU in the session that wrote it): a
// plain SIMT f32 kernel with 16 FMAs per 8 shared loads per thread, no tensor
// cores, no vectorised/asynchronous global loads. For large m roughly 10-20% of
// the GPU's f32 FMA peak (a few TFLOP/s on an H100), far below cuBLAS bf16
// tensor-core GEMMs. For decode (small m) it is bound by one thread per output
// walking k serially: only ceil(n/64) blocks run when m <= 64, so a layer with
// n = 896 uses 14 of 132 SMs. That is the price of the single-chain contract; the
// deterministic mode trades speed for bitwise reproducibility.
#include "kernels/cuda/linear_tiled.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kBM = 64;  // rows of y per block
constexpr int kBN = 64;  // columns of y per block
constexpr int kBK = 32;  // k per shared-memory stage
constexpr int kThreads = 256;
constexpr int kPer = 4;  // rows (and columns) per thread
constexpr int64_t kMaxGridY = 65535;

__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename WT>
__global__ void __launch_bounds__(kThreads)
    LinearTiledKernel(const float* __restrict__ x, int64_t m, int64_t k, const WT* __restrict__ w, int64_t n,
                      const float* __restrict__ bias, float* __restrict__ y, int64_t ldy) {
  // [kk][row]: +1 padding so the transposing stores (one row, 32 kk per warp) hit
  // 32 different banks.
  __shared__ float xs[kBK][kBM + 1];
  __shared__ float ws[kBK][kBN + 1];
  const int tid = threadIdx.x;
  const int tx = tid % 16, ty = tid / 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kBN;

  float acc[kPer][kPer];
  for (int i = 0; i < kPer; ++i) {
    for (int j = 0; j < kPer; ++j) acc[i][j] = 0.f;
  }

  for (int64_t k0 = 0; k0 < k; k0 += kBK) {
    // Stage: element e = tid + 256 * r of the 64 x 32 tile is (e / 32, e % 32), so
    // a warp reads 32 consecutive k of one row. Out-of-range entries are 0 and
    // never enter a valid output's chain.
    for (int r = 0; r < kBM * kBK / kThreads; ++r) {
      const int e = tid + kThreads * r;
      const int row = e / kBK, kk = e % kBK;
      const int64_t kg = k0 + kk;
      const int64_t xi = m0 + row, wj = n0 + row;
      xs[kk][row] = (xi < m && kg < k) ? x[xi * k + kg] : 0.f;
      ws[kk][row] = (wj < n && kg < k) ? ToF32(w[wj * k + kg]) : 0.f;
    }
    __syncthreads();
    const int kt = k - k0 < kBK ? static_cast<int>(k - k0) : kBK;
    if (kt == kBK) {
#pragma unroll 8
      for (int kk = 0; kk < kBK; ++kk) {
        float a[kPer], b[kPer];
        for (int i = 0; i < kPer; ++i) a[i] = xs[kk][ty + 16 * i];
        for (int j = 0; j < kPer; ++j) b[j] = ws[kk][tx + 16 * j];
        for (int i = 0; i < kPer; ++i) {
          for (int j = 0; j < kPer; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
      }
    } else {  // the last, partial k tile: the same chain, only its valid k
      for (int kk = 0; kk < kt; ++kk) {
        float a[kPer], b[kPer];
        for (int i = 0; i < kPer; ++i) a[i] = xs[kk][ty + 16 * i];
        for (int j = 0; j < kPer; ++j) b[j] = ws[kk][tx + 16 * j];
        for (int i = 0; i < kPer; ++i) {
          for (int j = 0; j < kPer; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
      }
    }
    __syncthreads();
  }

  for (int i = 0; i < kPer; ++i) {
    const int64_t row = m0 + ty + 16 * i;
    if (row >= m) continue;
    for (int j = 0; j < kPer; ++j) {
      const int64_t col = n0 + tx + 16 * j;
      if (col >= n) continue;
      y[row * ldy + col] = bias != nullptr ? acc[i][j] + bias[col] : acc[i][j];
    }
  }
}

template <typename WT>
cudaError_t Launch(const float* x, int64_t m, int64_t k, const void* w, int64_t n, const float* bias,
                   float* y, int64_t ldy, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((m + kBM - 1) / kBM), static_cast<unsigned>((n + kBN - 1) / kBN));
  TESSERA_LAUNCH(grid, kThreads, 0, stream, LinearTiledKernel<WT>)(x, m, k, static_cast<const WT*>(w), n,
                                                                    bias, y, ldy);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LinearTiled(const float* x, int64_t m, int64_t k, const void* w, ElemType w_type, int64_t n,
                        const float* bias, float* y, int64_t ldy, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  if (k < 0 || ldy < n || (n + kBN - 1) / kBN > kMaxGridY) return cudaErrorInvalidValue;
  switch (w_type) {
    case ElemType::kF32: return Launch<float>(x, m, k, w, n, bias, y, ldy, stream);
    case ElemType::kF16: return Launch<__half>(x, m, k, w, n, bias, y, ldy, stream);
    case ElemType::kBF16: return Launch<__nv_bfloat16>(x, m, k, w, n, bias, y, ldy, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tessera::kernels::cuda
