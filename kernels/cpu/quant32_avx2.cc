// AVX2 int8 Linear for the 32-element types Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4.
//
// Arithmetic: exactly the per-element sequence of quant32_scalar.cc (bitwise equal). The
// tiling is quant_avx2.cc's (avx2q::Cols: MR rows x 8 columns, columns c and c + 4 sharing
// one vector, 128-bit halves), so every lane runs the scalar float chain in block order and
// results are batch-invariant.
//
// Integer block dots, exact (maddubs: unsigned weight bytes times int8 x, |x| <= 127):
//   Q4_1: dot(nib, x)                        nib <= 15: int16 sums of 16 products <= 30480
//   Q5_0: dot(q5, x) - 16 * sum(x)           q5 = v + 16 <= 31
//   Q5_1: dot(q5, x)                         q5 <= 31
//   MXFP4: dot(v + 12, x) - 12 * sum(x)      v + 12 <= 24 (a shuffled table)
//     (<= 31: int16 sums of 8 products <= 31496, widened by madd before more adds)
//   IQ4_NL: dot(|v|, x * sign(v))            |v| <= 127 (v never 0): int16 pairs <= 32258,
//     widened by madd at once (as Q8_0 does)
// with sum(x) the block sums QuantizeActs already made.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "common/quant.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/quant32.h"
#include "kernels/cpu/quant_avx2_tile.h"

namespace tessera::kernels::cpu::internal {
namespace {

using namespace avx2q;  // NOLINT: the shared tiling (quant_avx2_tile.h)

inline uint32_t Ld32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The table in both 128-bit lanes.
inline __m256i Table(const Table16& t) {
  return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(t.b)));
}

// Nibbles of the 16 qs bytes at qs_off of the columns i and i + 4 (i < 4): lo[i] elements
// 0..15, hi[i] elements 16..31 (low half column i, high half column i + 4).
inline void Nibbles(const uint8_t* w0, int64_t rb, int64_t qs_off, __m256i* lo, __m256i* hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m256i v = LoadPair(w0 + i * rb + qs_off, w0 + (i + 4) * rb + qs_off);
    lo[i] = _mm256_and_si256(v, m4);
    hi[i] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  }
}

// Adds the fifth bits (bit l of the little-endian u32 qh at qh_off = element l) as 16.
inline void AddHighBits(const uint8_t* w0, int64_t rb, int64_t qh_off, __m256i* lo, __m256i* hi) {
  // Byte l of a half takes qh byte l / 8 (lo) or 2 + l / 8 (hi) and tests bit l % 8.
  const __m256i ctrl_lo = _mm256_set_epi64x(0x0101010101010101, 0, 0x0101010101010101, 0);
  const __m256i ctrl_hi = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                            0x0303030303030303, 0x0202020202020202);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201));
  const __m256i b16 = _mm256_set1_epi8(16);
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m256i qh = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_cvtsi32_si128(static_cast<int>(Ld32(w0 + i * rb + qh_off)))),
        _mm_cvtsi32_si128(static_cast<int>(Ld32(w0 + (i + 4) * rb + qh_off))), 1);
    const __m256i sl = _mm256_and_si256(_mm256_shuffle_epi8(qh, ctrl_lo), bit);
    const __m256i sh = _mm256_and_si256(_mm256_shuffle_epi8(qh, ctrl_hi), bit);
    lo[i] = _mm256_or_si256(lo[i], _mm256_and_si256(_mm256_cmpeq_epi8(sl, bit), b16));
    hi[i] = _mm256_or_si256(hi[i], _mm256_and_si256(_mm256_cmpeq_epi8(sh, bit), b16));
  }
}

// f32 scales 2^(e - 128) (E8M0ToF32Half) of the 8 columns' E8M0 bytes at off.
inline __m256 LoadE8(const uint8_t* w0, int64_t rb, int64_t off) {
  uint64_t e8 = 0;
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) e8 |= uint64_t{w0[c * rb + off]} << (8 * c);
  const __m256i e = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(e8)));
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
  const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);  // e = 0, 1
  const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small));
}

// One type's Tile for avx2q::Cols. Per weight block, Unpack fills w[0..3] (elements 0..15)
// and w[4..7] (16..31) with unsigned bytes (|v| for kSigned, whose signs go to s[0..7]);
// isum = dot - kOffset * sum(x). kWide: bytes above 15, so int16 lanes hold sums of at
// most 8 products; kMin: the min's second fma.
template <DType T>
struct Kind32 {
  static constexpr Layout32 kL = LayoutOf(T);
  static constexpr DType kType = T;
  static constexpr bool kMin = kL.min;
  static constexpr bool kSigned = T == DType::kIQ4_NL;
  static constexpr bool kWide = kL.qh >= 0 || T == DType::kMXFP4;
  static constexpr int32_t kOffset = T == DType::kQ5_0 ? 16 : T == DType::kMXFP4 ? kMxfp4Offset : 0;

  static void Unpack(const uint8_t* w0, int64_t rb, int64_t off, __m256i* w, [[maybe_unused]] __m256i* s) {
    Nibbles(w0, rb, off + kL.qs, w, w + 4);
    if constexpr (kL.qh >= 0) AddHighBits(w0, rb, off + kL.qh, w, w + 4);
    if constexpr (T == DType::kMXFP4) {
      const __m256i table = Table(kMxfp4Table);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) w[i] = _mm256_shuffle_epi8(table, w[i]);
    }
    if constexpr (kSigned) {
      const __m256i table = Table(kIq4Table);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        s[i] = _mm256_shuffle_epi8(table, w[i]);
        w[i] = _mm256_abs_epi8(s[i]);
      }
    }
  }

  template <int MR>
  static void Tile(const QuantActs& a, int64_t i0, const uint8_t* w0, int64_t rb, int nc,
                   const float* bias, float* y, int64_t ldy, const char* pf) {
    const int64_t nb = a.k / 32;
    [[maybe_unused]] const __m256i ones = _mm256_set1_epi16(1);  // (not for kSigned)
    __m256 acc[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      Prefetch(pf, 8 * kL.bytes);
      const int64_t off = b * kL.bytes;
      __m256i w[8], s[8];
      Unpack(w0, rb, off, w, s);
      __m256 dw, mw = _mm256_setzero_ps();
      if constexpr (kL.e8m0) {
        dw = LoadE8(w0, rb, off);
      } else {
        dw = LoadD8(w0, rb, off);
      }
      if constexpr (kMin) mw = LoadD8(w0, rb, off + 2);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const int64_t row = i0 + r;
        const int8_t* xb = a.q + row * a.k + 32 * b;
        const __m256i xl = Bcast16(xb), xh = Bcast16(xb + 16);
        const int32_t xsum = a.sums[row * nb + b];
        __m256i isum;
        if constexpr (kSigned) {  // as Q8_0
          isum = SignedDot(w, w + 4, s, s + 4, xl, xh);
        } else {
          __m256i p[4];  // int16: 4 products per lane
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i)
            p[i] = _mm256_add_epi16(_mm256_maddubs_epi16(w[i], xl), _mm256_maddubs_epi16(w[i + 4], xh));
          const __m256i h01 = _mm256_hadd_epi16(p[0], p[1]), h23 = _mm256_hadd_epi16(p[2], p[3]);
          if constexpr (kWide) {  // 8 products per int16 lane: widen, then columns 0..3 | 4..7
            isum = _mm256_hadd_epi32(_mm256_madd_epi16(h01, ones), _mm256_madd_epi16(h23, ones));
          } else {  // nibbles: 16 products per int16 lane still fit (as Q4_0)
            isum = _mm256_madd_epi16(_mm256_hadd_epi16(h01, h23), ones);
          }
        }
        if constexpr (kOffset != 0) isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(kOffset * xsum));
        const __m256 dx = _mm256_set1_ps(a.d[row * nb + b]);
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum), acc[r]);
        if constexpr (kMin)
          acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(mw, dx), _mm256_set1_ps(static_cast<float>(xsum)), acc[r]);
      }
    }
    Store<MR>(acc, nc, bias, y, ldy);
  }
};

}  // namespace

void LinearQuant32ColsAvx2(const QuantActs& a, const void* w, DType w_type, int64_t n_begin,
                           int64_t n_end, const float* bias, float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  Visit32(w_type, [&](auto t) { Cols<Kind32<decltype(t)::value>>(a, wb, n_begin, n_end, bias, y, ldy); });
}

}  // namespace tessera::kernels::cpu::internal
