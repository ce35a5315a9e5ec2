// AVX2 int8 kernels for block-quantized weights (Q8_0, Q4_0, Q4_K).
//
// Arithmetic: exactly the per-element sequence of quant_scalar.cc (bitwise equal).
// Integer block dots are exact whatever the reduction order, so each is computed
// with maddubs/madd/hadd, and the float chain s = fma(d_w * d_x, isum, s) runs with
// 8 OUTPUT COLUMNS per __m256 (lane c = column c): every lane performs the scalar
// sequence, for any tile shape, so results are batch-invariant.
//
// Exactness: maddubs multiplies unsigned weights (4-bit 0..15, or |w| <= 128 with
// the sign moved onto x) by int8 x with |x| <= 127, so int16 pair sums never saturate;
// int16 adds/hadds are used only while the bound stays < 2^15 (noted at each use).
//
// Tiling: a tile is MR (1..4) activation rows x 8 weight rows (columns of y); columns
// c and c + 4 share one vector (128-bit halves), so one maddubs serves two columns
// and 8 columns reduce with 3 hadds. Per weight block the 8 columns are unpacked once
// and reused for the MR rows. Rows run
// in chunks of kMc (x chunk in L2); per chunk each 8-column group streams its weights
// once from memory (prefetching the next group) and the chunk's row groups reuse them
// from L1/L2.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/quant.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/quant_avx2_tile.h"
#include "kernels/cpu/simd_avx2.h"

namespace tessera::kernels::cpu::internal {
namespace {

using namespace avx2q;  // NOLINT: the shared tiling (quant_avx2_tile.h)


struct Q8_0 {
  static constexpr DType kType = DType::kQ8_0;
  // Columns i and i + 4 share a vector (A: elements 0..15, B: 16..31), so 8 columns
  // reduce with 3 hadds.
  template <int MR>
  static void Tile(const QuantActs& a, int64_t i0, const uint8_t* w0, int64_t rb, int nc,
                   const float* bias, float* y, int64_t ldy, const char* pf) {
    const int64_t nb = a.k / 32;
    __m256 acc[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      Prefetch(pf, 8 * 34);
      const int64_t off = b * 34;
      __m256i wa[4], wb[4], aa[4], ab[4];
#pragma GCC unroll 8
      for (int i = 0; i < 4; ++i) {
        wa[i] = LoadPair(w0 + i * rb + off + 2, w0 + (i + 4) * rb + off + 2);
        wb[i] = LoadPair(w0 + i * rb + off + 18, w0 + (i + 4) * rb + off + 18);
        aa[i] = _mm256_abs_epi8(wa[i]);  // -128 -> 0x80 = 128 as unsigned
        ab[i] = _mm256_abs_epi8(wb[i]);
      }
      const __m256 dw = LoadD8(w0, rb, off);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const int64_t row = i0 + r;
        const int8_t* xb = a.q + row * a.k + 32 * b;
        const __m256i xl = Bcast16(xb), xh = Bcast16(xb + 16);
        const __m256i isum = SignedDot(aa, ab, wa, wb, xl, xh);
        const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(a.d[row * nb + b]));
        acc[r] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(isum), acc[r]);
      }
    }
    Store<MR>(acc, nc, bias, y, ldy);
  }
};

struct Q4_0 {
  static constexpr DType kType = DType::kQ4_0;
  // Columns c and c + 4 share a vector (low / high 128 bits), so one maddubs serves two
  // columns and the reduction needs 3 hadds + 1 madd for 8 columns.
  template <int MR>
  static void Tile(const QuantActs& a, int64_t i0, const uint8_t* w0, int64_t rb, int nc,
                   const float* bias, float* y, int64_t ldy, const char* pf) {
    const int64_t nb = a.k / 32;
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      Prefetch(pf, 8 * 18);
      const int64_t off = b * 18;
      __m256i lo[4], hi[4];  // nibbles 0..15: elements 0..15 (lo), 16..31 (hi)
#pragma GCC unroll 8
      for (int i = 0; i < 4; ++i) {
        const __m256i v = LoadPair(w0 + i * rb + off + 2, w0 + (i + 4) * rb + off + 2);
        lo[i] = _mm256_and_si256(v, m4);
        hi[i] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      }
      const __m256 dw = LoadD8(w0, rb, off);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const int64_t row = i0 + r;
        const int8_t* xb = a.q + row * a.k + 32 * b;
        const __m256i xl = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb)));
        const __m256i xh = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 16)));
        __m256i p[4];  // int16 lanes <= 2 * 2 * 15 * 127 = 7620
#pragma GCC unroll 8
        for (int i = 0; i < 4; ++i)
          p[i] = _mm256_add_epi16(_mm256_maddubs_epi16(lo[i], xl), _mm256_maddubs_epi16(hi[i], xh));
        // Per half: [p0 4-lane sums x2, p1 x2, p2 x2, p3 x2] (<= 30480), then pairs.
        const __m256i h = _mm256_hadd_epi16(_mm256_hadd_epi16(p[0], p[1]), _mm256_hadd_epi16(p[2], p[3]));
        const __m256i dot = _mm256_madd_epi16(h, ones);  // lanes: columns 0..3 | 4..7
        const __m256i isum = _mm256_sub_epi32(dot, _mm256_set1_epi32(8 * int32_t{a.sums[row * nb + b]}));
        const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(a.d[row * nb + b]));
        acc[r] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(isum), acc[r]);
      }
    }
    Store<MR>(acc, nc, bias, y, ldy);
  }
};


struct Q4_K {
  static constexpr DType kType = DType::kQ4_K;
  template <int MR>
  static void Tile(const QuantActs& a, int64_t i0, const uint8_t* w0, int64_t rb, int nc,
                   const float* bias, float* y, int64_t ldy, const char* pf) {
    const int64_t nb = a.k / 256, ng = a.k / 32;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      Prefetch(pf, 8 * 144);
      const int64_t off = b * 144;
      const __m256 dw = LoadD8(w0, rb, off), dminw = LoadD8(w0, rb, off + 2);
      // 6-bit scales/mins of the 8 columns: sc[c] bytes t = sc_t, mn[c] bytes t = m_t.
      uint64_t sc[8], mn[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        constexpr uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
        uint32_t u[3];
        std::memcpy(u, w0 + c * rb + off + 4, 12);
        const uint32_t s_lo = u[0] & k1, m_lo = u[1] & k1;
        const uint32_t s_hi = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
        const uint32_t m_hi = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
        sc[c] = s_lo | (uint64_t{s_hi} << 32);
        mn[c] = m_lo | (uint64_t{m_hi} << 32);
      }
      __m256i sc8[8], mn8[8];
      Transpose8x8(sc, sc8);
      Transpose8x8(mn, mn8);
      __m256i mn16[4];  // int16 pairs (m_t, m_t+1) per column, for madd with x's sums
#pragma GCC unroll 8
      for (int t = 0; t < 4; ++t)
        mn16[t] = _mm256_or_si256(mn8[2 * t], _mm256_slli_epi32(mn8[2 * t + 1], 16));
      __m256i isc[MR];
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) isc[r] = _mm256_setzero_si256();
            for (int cc = 0; cc < 4; ++cc) {  // 64 elements: sub-block 2cc low nibbles, 2cc+1 high
        // As Q4_0: columns i and i + 4 share a vector; A: bytes 0..15, B: bytes 16..31.
        __m256i qa[4], qb[4];
#pragma GCC unroll 8
        for (int i = 0; i < 4; ++i) {
          const uint8_t* p0 = w0 + i * rb + off + 16 + 32 * cc;
          const uint8_t* p1 = w0 + (i + 4) * rb + off + 16 + 32 * cc;
          qa[i] = LoadPair(p0, p1);
          qb[i] = LoadPair(p0 + 16, p1 + 16);
        }
#pragma GCC unroll 8
        for (int h = 0; h < 2; ++h) {
          const int t = 2 * cc + h;
          __m256i wa[4], wb[4];
#pragma GCC unroll 8
          for (int i = 0; i < 4; ++i) {
            wa[i] = _mm256_and_si256(h == 0 ? qa[i] : _mm256_srli_epi16(qa[i], 4), m4);
            wb[i] = _mm256_and_si256(h == 0 ? qb[i] : _mm256_srli_epi16(qb[i], 4), m4);
          }
          // int16 lanes 2c, 2c+1 of each half = scale of that half's column.
          const __m256i sc16 = _mm256_or_si256(sc8[t], _mm256_slli_epi32(sc8[t], 16));
#pragma GCC unroll 8
          for (int r = 0; r < MR; ++r) {
            const int8_t* xb = a.q + (i0 + r) * a.k + 256 * b + 32 * t;
            const __m256i xl = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb)));
            const __m256i xh = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xb + 16)));
            __m256i p[4];  // int16 lanes <= 7620
#pragma GCC unroll 8
            for (int i = 0; i < 4; ++i)
              p[i] = _mm256_add_epi16(_mm256_maddubs_epi16(wa[i], xl), _mm256_maddubs_epi16(wb[i], xh));
            const __m256i hs = _mm256_hadd_epi16(_mm256_hadd_epi16(p[0], p[1]), _mm256_hadd_epi16(p[2], p[3]));
            isc[r] = _mm256_add_epi32(isc[r], _mm256_madd_epi16(hs, sc16));  // sc_t * dot_t
          }
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const int64_t row = i0 + r;
        const int16_t* xs = a.sums + row * ng + 8 * b;
        __m256i imin = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int t = 0; t < 8; t += 2) {  // m_t * bsum_t + m_t+1 * bsum_t+1 per column
          int32_t pair;
          std::memcpy(&pair, xs + t, 4);
          imin = _mm256_add_epi32(imin, _mm256_madd_epi16(mn16[t / 2], _mm256_set1_epi32(pair)));
        }
        const __m256 dx = _mm256_set1_ps(a.d[row * nb + b]);
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isc[r]), acc[r]);
        acc[r] = _mm256_fnmadd_ps(_mm256_mul_ps(dminw, dx), _mm256_cvtepi32_ps(imin), acc[r]);
      }
    }
    Store<MR>(acc, nc, bias, y, ldy);
  }
};


}  // namespace

void QuantizeActsAvx2(const float* x, int64_t rows, int64_t k, int64_t block, int8_t* q,
                      float* d, int16_t* sums, int16_t* sums16) {
  const int64_t nb = k / block;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * k;
    int8_t* qr = q + r * k;
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = xr + b * block;
      __m256 amax = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
      for (int64_t l = 0; l < block; l += 8) {
        const __m256 v = _mm256_loadu_ps(xb + l);
        nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        amax = _mm256_max_ps(_mm256_and_ps(v, abs_mask), amax);  // NaN lanes keep amax
      }
      const float db = avx2::HmaxPs(amax) / 127.0f;
      const float id = db != 0.0f ? 1.0f / db : 0.0f;
      d[r * nb + b] = _mm256_movemask_ps(nan) != 0 ? std::numeric_limits<float>::quiet_NaN() : db;
      const __m256 vid = _mm256_set1_ps(id);
      for (int64_t l = 0; l < block; l += 32) {
        __m256i i[4];
#pragma GCC unroll 8
        for (int u = 0; u < 4; ++u) {
          __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xb + l + 8 * u), vid);
          v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));  // NaN -> 0
          v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
          i[u] = _mm256_cvtps_epi32(v);  // MXCSR default: nearest, ties to even
        }
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]),
                                             _mm256_packs_epi32(i[2], i[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(qr + b * block + l),
                            _mm256_permutevar8x32_epi32(p, order));
      }
    }
    QuantActSums(qr, k, sums + r * (k / 32), sums16 != nullptr ? sums16 + r * (k / 16) : nullptr);
  }
}

void LinearQuantColsAvx2(const QuantActs& a, const void* w, DType w_type, int64_t n_begin,
                         int64_t n_end, const float* bias, float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (w_type) {
    case DType::kQ8_0: return Cols<Q8_0>(a, wb, n_begin, n_end, bias, y, ldy);
    case DType::kQ4_0: return Cols<Q4_0>(a, wb, n_begin, n_end, bias, y, ldy);
    case DType::kQ4_K: return Cols<Q4_K>(a, wb, n_begin, n_end, bias, y, ldy);
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_XS: return KQuantColsAvx2(a, w, w_type, n_begin, n_end, bias, y, ldy);
    case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: case DType::kIQ4_NL: case DType::kMXFP4:
      return LinearQuant32ColsAvx2(a, w, w_type, n_begin, n_end, bias, y, ldy);
    default: break;
  }
}

}  // namespace tessera::kernels::cpu::internal
