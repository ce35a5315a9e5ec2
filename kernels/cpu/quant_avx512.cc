// AVX-512 VNNI int8 kernels for block-quantized weights (Q8_0, Q4_0, Q4_K). Entered only
// when UseAvx512Vnni() (ops.cc); every function carries the target attribute, so the
// file needs no special compile flags.
//
// Arithmetic: exactly the per-element sequence of quant_scalar.cc (bitwise equal to
// the scalar and AVX2 kernels). vpdpbusd sums 4 u8 x s8 products into int32 without
// saturation, so block dots are the same exact integers:
//   Q4_0: dot(nib, x) - 8 * sum(x)           (nib 0..15 is the unsigned operand)
//   Q8_0: dot(w + 128, x) - 128 * sum(x)     (w ^ 0x80 = w + 128 as u8; |dot| < 2^21)
// with sum(x) the activation block sums QuantizeActs already made (Q4_K: see ColsQ4K).
// The float chain s = fma(d_w * d_x, isum, s) then runs per lane in block order.
//
// Layout: 16 OUTPUT COLUMNS per __m512 (lane c = column c); per weight block the 16
// columns' bytes are transposed once into 8 vectors of "4 consecutive k of column c
// in dword c", so each row needs just 8 vpdpbusd with a broadcast dword of x, and no
// horizontal reduction. The transposed block serves all rows of a chunk (kMc rows,
// f32 accumulators in an L1 stack buffer), which amortizes the transpose for M > 1.
// Results depend on neither tile shape nor chunking: batch-invariant. zmm rather than
// ymm: on Zen 4 both reach the same vpdpbusd rate (bench Limit/Int8VnniPeak), and 16
// lanes halve the per-row cvt/mul/fma and x broadcasts. ops.cc calls this only from
// the m where it beats the AVX2 kernel (LinearQuantAvx512Preferred).
#include "kernels/cpu/quant_avx512_tile.h"  // first: it silences a GCC false positive in immintrin.h

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/quant.h"
#include "kernels/cpu/internal.h"

namespace tessera::kernels::cpu::internal {
namespace {

using namespace avx512q;  // NOLINT: the shared helpers (quant_avx512_tile.h)

// Kinds for avx512q::Cols (quant_avx512_tile.h): each fills wv[0..7] for one 32-element
// block so that wv[t] (u8, per column) pairs with x bytes 4t..4t+3, and
// isum = dot - kOffset * sum(x).
struct Q8_0 {
  static constexpr DType kType = DType::kQ8_0;
  static constexpr bool kMin = false;
  TESSERA_AVX512 static __m512 Scale16(const uint8_t* w0, int64_t rb, int64_t off) { return LoadD16(w0, rb, off); }
  static constexpr int64_t kBlockBytes = 34;
  static constexpr int32_t kOffset = 128;
  TESSERA_AVX512 static void Unpack(const uint8_t* w0, int64_t rb, int64_t off, __m512i* wv) {
    __m512i lo[4], hi[4];
    Transpose16x4(w0 + off + 2, rb, lo);   // elements 0..15
    Transpose16x4(w0 + off + 18, rb, hi);  // elements 16..31
    const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      wv[t] = _mm512_xor_si512(lo[t], flip);
      wv[t + 4] = _mm512_xor_si512(hi[t], flip);
    }
  }
};

struct Q4_0 {
  static constexpr DType kType = DType::kQ4_0;
  static constexpr bool kMin = false;
  TESSERA_AVX512 static __m512 Scale16(const uint8_t* w0, int64_t rb, int64_t off) { return LoadD16(w0, rb, off); }
  static constexpr int64_t kBlockBytes = 18;
  static constexpr int32_t kOffset = 8;
  TESSERA_AVX512 static void Unpack(const uint8_t* w0, int64_t rb, int64_t off, __m512i* wv) {
    __m512i v[4];
    Transpose16x4(w0 + off + 2, rb, v);  // byte l: element l (low nibble), 16 + l (high)
    const __m512i m4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
    for (int t = 0; t < 4; ++t) {
      wv[t] = _mm512_and_si512(v[t], m4);
      wv[t + 4] = _mm512_and_si512(_mm512_srli_epi16(v[t], 4), m4);
    }
  }
};

// Q4_K: per 256-block, isc = sum_t sc_t * dot_t (dot_t of sub-block t by 8 vpdpbusd,
// times sc_t by vpmulld; |isc| < 2^25) and imin = sum_t m_t * bsum_t (vpdpwssd on
// int16 pairs), then the two fmas of quant_scalar.cc. Per chunk cc of 32 qs bytes the
// 16 columns are transposed once (low nibbles: sub-block 2cc, high: 2cc + 1); integer
// accumulators per row live next to the f32 ones.
TESSERA_AVX512 void ColsQ4K(const QuantActs& a, const uint8_t* w, int64_t n0, int64_t n1,
                            const float* bias, float* y, int64_t ldy) {
  const int64_t rb = DTypeRowBytes(DType::kQ4_K, a.k);
  const int64_t nb = a.k / 256, ng = a.k / 32;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[kMc];
  __m512i isc[kMc];
  for (int64_t mb = 0; mb < a.m; mb += kMc) {
    const int64_t rows = std::min(a.m, mb + kMc) - mb;
    for (int64_t j0 = n0; j0 < n1; j0 += kCols) {
      const int nc = static_cast<int>(std::min<int64_t>(kCols, n1 - j0));
      const uint8_t* w0 = Group16(w, j0, nc, rb);
      const char* pf = j0 + kCols < n1 ? reinterpret_cast<const char*>(w + (j0 + kCols) * rb) : nullptr;
      for (int64_t r = 0; r < rows; ++r) acc[r] = _mm512_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t off = b * 144;
        PrefetchGroup(pf, 144);
        const __m512 dw = LoadD16(w0, rb, off), dminw = LoadD16(w0, rb, off + 2);
        // 6-bit scales and mins, transposed: sct[t][c] = sc_t of column c.
        alignas(64) uint8_t sct[8][kCols], mnt[8][kCols];
        for (int c = 0; c < kCols; ++c) {
          const uint8_t* scales = w0 + c * rb + off + 4;
#pragma GCC unroll 8
          for (int t = 0; t < 8; ++t) Q4KScaleMin(scales, t, &sct[t][c], &mnt[t][c]);
        }
        __m512i mn16[4];  // int16 pairs (m_2u, m_2u+1) per column
#pragma GCC unroll 4
        for (int u = 0; u < 4; ++u) {
          const __m512i lo = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(mnt[2 * u])));
          const __m512i hi = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(mnt[2 * u + 1])));
          mn16[u] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
        }
        for (int cc = 0; cc < 4; ++cc) {
          __m512i v[8], lo[8], hi[8];
          Transpose16x4(w0 + off + 16 + 32 * cc, rb, v);
          Transpose16x4(w0 + off + 32 + 32 * cc, rb, v + 4);
#pragma GCC unroll 8
          for (int t = 0; t < 8; ++t) {
            lo[t] = _mm512_and_si512(v[t], m4);
            hi[t] = _mm512_and_si512(_mm512_srli_epi16(v[t], 4), m4);
          }
          const __m512i sc_lo = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(sct[2 * cc])));
          const __m512i sc_hi = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(sct[2 * cc + 1])));
          for (int64_t r = 0; r < rows; ++r) {
            const int8_t* xb = a.q + (mb + r) * a.k + 256 * b + 64 * cc;
            __m512i d0 = _mm512_setzero_si512(), d1 = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int t = 0; t < 8; ++t) {
              d0 = _mm512_dpbusd_epi32(d0, lo[t], _mm512_set1_epi32(Ld32(xb + 4 * t)));
              d1 = _mm512_dpbusd_epi32(d1, hi[t], _mm512_set1_epi32(Ld32(xb + 32 + 4 * t)));
            }
            const __m512i p = _mm512_add_epi32(_mm512_mullo_epi32(d0, sc_lo), _mm512_mullo_epi32(d1, sc_hi));
            isc[r] = cc == 0 ? p : _mm512_add_epi32(isc[r], p);
          }
        }
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t row = mb + r;
          const int16_t* xs = a.sums + row * ng + 8 * b;
          __m512i imin = _mm512_setzero_si512();
#pragma GCC unroll 4
          for (int u = 0; u < 4; ++u) {
            int32_t pair;
            std::memcpy(&pair, xs + 2 * u, 4);
            imin = _mm512_dpwssd_epi32(imin, mn16[u], _mm512_set1_epi32(pair));
          }
          const __m512 dx = _mm512_set1_ps(a.d[row * nb + b]);
          acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isc[r]), acc[r]);
          acc[r] = _mm512_fnmadd_ps(_mm512_mul_ps(dminw, dx), _mm512_cvtepi32_ps(imin), acc[r]);
        }
      }
      StoreGroup(acc, rows, nc, bias, j0, y, ldy, mb);
    }
  }
}

}  // namespace

void LinearQuantColsAvx512(const QuantActs& a, const void* w, DType w_type, int64_t n_begin,
                           int64_t n_end, const float* bias, float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (w_type) {
    case DType::kQ8_0: return Cols<Q8_0>(a, wb, n_begin, n_end, bias, y, ldy);
    case DType::kQ4_0: return Cols<Q4_0>(a, wb, n_begin, n_end, bias, y, ldy);
    case DType::kQ4_K: return ColsQ4K(a, wb, n_begin, n_end, bias, y, ldy);
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_XS: return KQuantColsAvx512(a, w, w_type, n_begin, n_end, bias, y, ldy);
    case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: case DType::kIQ4_NL: case DType::kMXFP4:
      return LinearQuant32ColsAvx512(a, w, w_type, n_begin, n_end, bias, y, ldy);
    default: break;
  }
}

}  // namespace tessera::kernels::cpu::internal
