// AVX2/FMA Linear: y[m, n] = x[m, :] . w[n, :] + bias[n] (both K-contiguous).
//
// Reduction order (identical for every output element, whichever tile computes it,
// so results are batch-invariant): one __m256 accumulator per element, stepping k
// by 8 with FMA from zero; Hsum tree (simd_avx2.h); the k % 8 tail by scalar FMA in
// increasing k; then + bias. Weight conversion (bf16 shift, f16 F16C) is exact, so
// packing weights to f32 first does not change any value either.
//
// Tiling: register tiles of MR rows of x by NR rows of w (4x3 for M >= 4, 1x8 for
// decode). Small M streams the weights once (bf16/f16 micro-panels converted once to
// f32 when more than one 4-row group reuses them); large M runs a cache-blocked GEMM
// (LargeMPanel) with bf16/f16 panels converted once to f32 scratch.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/simd_avx2.h"

namespace tessera::kernels::cpu::internal {
namespace {

using avx2::Fma;

struct F32W {
  using T = float;
  static __m256 Load(const float* p) { return _mm256_loadu_ps(p); }
  static float At(const float* p) { return *p; }
};
struct Bf16W {
  using T = uint16_t;
  static __m256 Load(const uint16_t* p) { return avx2::Load8(p, avx2::Bf16Tag{}); }
  static float At(const uint16_t* p) { return Bf16ToF32(*p); }
};
struct F16W {
  using T = uint16_t;
  static __m256 Load(const uint16_t* p) { return avx2::Load8(p, avx2::F16Tag{}); }
  static float At(const uint16_t* p) { return _cvtsh_ss(*p); }
};

// Scalar k-tail and bias of one element after its horizontal sum.
template <class W>
inline float Finish(float s, const float* xr, const typename W::T* wr, int64_t k8, int64_t k,
                    const float* bias) {
  for (int64_t kk = k8; kk < k; ++kk) s = Fma(xr[kk], W::At(wr + kk), s);
  if (bias != nullptr) s = s + *bias;
  return s;
}

// One MR x NR register tile over k in [kb, ke) (multiples of 8 within k8). Starts
// from zero when kb == 0, else from the 8-lane accumulators saved in `io`; when
// ke == k8 it finishes (Hsum, scalar tail over the full rows, bias) into y, else it
// saves the accumulators to `io`. Saving/restoring is exact, so K blocking keeps the
// per-element order above. x/w point at the rows' k = 0.
template <class W, int MR, int NR>
void Tile(const float* x, int64_t ldx, const typename W::T* w, int64_t ldw, int64_t kb,
          int64_t ke, int64_t k, float* io, const char* pf, const float* bias, float* y,
          int64_t ldy) {
  constexpr int kPfStep = NR * 8 * static_cast<int>(sizeof(typename W::T));
  const int64_t k8 = k & ~int64_t{7};
  __m256 acc[MR][NR];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      acc[i][j] = kb == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(io + (i * NR + j) * 8);
    }
  for (int64_t kk = kb; kk < ke; kk += 8) {
    if (pf != nullptr) {  // next weight block, in address order, as fast as we eat this one
      for (int off = 0; off < kPfStep; off += 64) _mm_prefetch(pf + off, _MM_HINT_T1);
      pf += kPfStep;
    }
    if constexpr (MR == 1) {
      const __m256 xv = _mm256_loadu_ps(x + kk);
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) {
        acc[0][j] = _mm256_fmadd_ps(xv, W::Load(w + j * ldw + kk), acc[0][j]);
      }
    } else {
      __m256 wv[NR];
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) wv[j] = W::Load(w + j * ldw + kk);
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) {
        const __m256 xv = _mm256_loadu_ps(x + i * ldx + kk);
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_fmadd_ps(xv, wv[j], acc[i][j]);
      }
    }
  }
  if (ke < k8) {
#pragma GCC unroll 4
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < NR; ++j) _mm256_storeu_ps(io + (i * NR + j) * 8, acc[i][j]);
    return;
  }
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j) {
    const float* bj = bias != nullptr ? bias + j : nullptr;
    const typename W::T* wr = w + j * ldw;
    if constexpr (MR == 4) {
      alignas(16) float s[4];
      _mm_store_ps(s, avx2::Hsum4(acc[0][j], acc[1][j], acc[2][j], acc[3][j]));
      for (int i = 0; i < 4; ++i) y[i * ldy + j] = Finish<W>(s[i], x + i * ldx, wr, k8, k, bj);
    } else {
      for (int i = 0; i < MR; ++i)
        y[i * ldy + j] = Finish<W>(avx2::Hsum(acc[i][j]), x + i * ldx, wr, k8, k, bj);
    }
  }
}

template <class W>
using TileFn = void (*)(const float*, int64_t, const typename W::T*, int64_t, int64_t, int64_t,
                        int64_t, float*, const char*, const float*, float*, int64_t);

constexpr int kMaxNr = 8;

// kTiles<W>[mr - 1][nr - 1] for mr in 1..4, nr in 1..8.
template <class W, int MR, int... NRs>
constexpr std::array<TileFn<W>, kMaxNr> TileRow(std::integer_sequence<int, NRs...>) {
  return {&Tile<W, MR, NRs + 1>...};
}
template <class W>
constexpr std::array<std::array<TileFn<W>, kMaxNr>, 4> kTiles = {
    TileRow<W, 1>(std::make_integer_sequence<int, kMaxNr>{}),
    TileRow<W, 2>(std::make_integer_sequence<int, kMaxNr>{}),
    TileRow<W, 3>(std::make_integer_sequence<int, kMaxNr>{}),
    TileRow<W, 4>(std::make_integer_sequence<int, kMaxNr>{})};

// Widest NR that keeps MR*NR accumulators plus operands in 16 ymm registers.
constexpr int NrFor(int64_t mr) { return mr == 1 ? 8 : mr == 4 ? 3 : 4; }

// Small M (decode, small batches): weight-bandwidth bound. Each weight micro-panel
// (NR rows) is loaded from memory once and reused for all m rows from L1/L2; x (at
// most 63 rows) stays in L2.
thread_local std::vector<float> t_micro;  // one converted weight micro-panel (SmallM)

template <class W>
void SmallM(const float* x, int64_t m, int64_t k, const typename W::T* w, int64_t n0,
            int64_t n1, const float* bias, float* y, int64_t ldy) {
  const int64_t k8 = k & ~int64_t{7};
  const int nr_main = NrFor(std::min<int64_t>(m, 4));
  for (int64_t jb = n0; jb < n1; jb += nr_main) {
    const int64_t nr = std::min<int64_t>(nr_main, n1 - jb);
    const float* bj = bias != nullptr ? bias + jb : nullptr;
    // Software prefetch of the next block: rows of only a few KB are too short for
    // the hardware stream prefetchers to reach full DRAM bandwidth.
    const char* next = jb + nr < n1 ? reinterpret_cast<const char*>(w + (jb + nr) * k) : nullptr;
    if constexpr (!std::is_same_v<W, F32W>) {
      if (m > 4) {  // several row groups: convert the micro-panel once (exact), reuse it
        const int64_t total = nr * k, t8 = total & ~int64_t{7};
        if (t_micro.size() < static_cast<size_t>(total)) t_micro.resize(total);
        float* p = t_micro.data();
        const typename W::T* src = w + jb * k;
        for (int64_t i = 0; i < t8; i += 8) _mm256_storeu_ps(p + i, W::Load(src + i));
        for (int64_t i = t8; i < total; ++i) p[i] = W::At(src + i);
        for (int64_t ib = 0; ib < m; ib += 4) {
          const int64_t mr = std::min<int64_t>(4, m - ib);
          kTiles<F32W>[mr - 1][nr - 1](x + ib * k, k, p, k, 0, k8, k, nullptr,
                                       ib == 0 ? next : nullptr, bj, y + ib * ldy + jb, ldy);
        }
        continue;
      }
    }
    for (int64_t ib = 0; ib < m; ib += 4) {
      const int64_t mr = std::min<int64_t>(4, m - ib);
      kTiles<W>[mr - 1][nr - 1](x + ib * k, k, w + jb * k, k, 0, k8, k, nullptr,
                                ib == 0 ? next : nullptr, bj, y + ib * ldy + jb, ldy);
    }
  }
}

// Large M (prefill): GEMM blocked for caches. Per panel of nc weight rows (packed to
// f32 once when bf16/f16; ~L2 sized), per block of kMc x rows, per k block of kKc:
// each 4-row x micro-panel (L1) meets every 3-row weight micro-panel of the panel.
// Accumulators of the block live in `acc` between k blocks.
constexpr int64_t kSmallM = 64;           // below: SmallM (x stays in L2)
constexpr int64_t kPanelBytes = 512 << 10;
constexpr int64_t kMc = 64;
constexpr int64_t kKc = 1024;             // max k block (floats); blocks are even

thread_local std::vector<float> t_panel;
thread_local std::vector<float> t_acc;  // 8 floats per accumulator

template <class W>
void LargeMPanel(const float* x, int64_t m, int64_t k, const typename W::T* w, int64_t nc,
                 const float* bias, float* y, int64_t ldy) {
  const int64_t k8 = k & ~int64_t{7};
  const int64_t k_blocks = (k8 + kKc - 1) / kKc;
  const int64_t kc = ((k8 + k_blocks - 1) / k_blocks + 7) & ~int64_t{7};
  const int64_t tiles_n = (nc + 2) / 3;
  const int64_t acc_floats = kMc / 4 * tiles_n * 12 * 8;
  if (t_acc.size() < static_cast<size_t>(acc_floats)) t_acc.resize(acc_floats);
  for (int64_t mb = 0; mb < m; mb += kMc) {
    const int64_t me = std::min(m, mb + kMc);
    for (int64_t kb = 0; kb < k8; kb += kc) {
      const int64_t ke = std::min(k8, kb + kc);
      for (int64_t ib = mb; ib < me; ib += 4) {
        const int64_t mr = std::min<int64_t>(4, me - ib);
        float* io = t_acc.data() + (ib - mb) / 4 * tiles_n * 12 * 8;
        for (int64_t jb = 0; jb < nc; jb += 3) {
          const int64_t nr = std::min<int64_t>(3, nc - jb);
          const float* bj = bias != nullptr ? bias + jb : nullptr;
          kTiles<W>[mr - 1][nr - 1](x + ib * k, k, w + jb * k, k, kb, ke, k,
                                    io + jb / 3 * 12 * 8, nullptr, bj, y + ib * ldy + jb, ldy);
        }
      }
    }
  }
}

template <class W>
void Cols(const float* x, int64_t m, int64_t k, const typename W::T* w, int64_t n0,
          int64_t n1, const float* bias, float* y, int64_t ldy) {
  if (m < kSmallM || k < 8) return SmallM<W>(x, m, k, w, n0, n1, bias, y, ldy);
  const int64_t nc_max = std::clamp<int64_t>(kPanelBytes / (k * 4) / 24 * 24, 24, 96);
  for (int64_t nb = n0; nb < n1; nb += nc_max) {
    const int64_t nc = std::min(nc_max, n1 - nb);
    const float* bb = bias != nullptr ? bias + nb : nullptr;
    if constexpr (std::is_same_v<W, F32W>) {
      LargeMPanel<F32W>(x, m, k, w + nb * k, nc, bb, y + nb, ldy);
    } else {
      if (t_panel.size() < static_cast<size_t>(nc * k)) t_panel.resize(nc * k);
      float* p = t_panel.data();
      const typename W::T* src = w + nb * k;
      const int64_t total = nc * k, t8 = total & ~int64_t{7};
      for (int64_t i = 0; i < t8; i += 8) _mm256_storeu_ps(p + i, W::Load(src + i));
      for (int64_t i = t8; i < total; ++i) p[i] = W::At(src + i);
      LargeMPanel<F32W>(x, m, k, p, nc, bb, y + nb, ldy);
    }
  }
}

}  // namespace

void LinearColsAvx2(const float* x, int64_t m, int64_t k, const void* w, DType w_type,
                    int64_t n_begin, int64_t n_end, const float* bias, float* y,
                    int64_t ldy) {
  switch (w_type) {
    case DType::kF32:
      return Cols<F32W>(x, m, k, static_cast<const float*>(w), n_begin, n_end, bias, y, ldy);
    case DType::kBF16:
      return Cols<Bf16W>(x, m, k, static_cast<const uint16_t*>(w), n_begin, n_end, bias, y,
                         ldy);
    case DType::kF16:
      return Cols<F16W>(x, m, k, static_cast<const uint16_t*>(w), n_begin, n_end, bias, y,
                        ldy);
    default:
      break;
  }
}

}  // namespace tessera::kernels::cpu::internal
