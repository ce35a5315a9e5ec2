// Shared tiling of the AVX2 quantized Linear kernels (quant_avx2.cc and every
// *_avx2.cc that adds weight types): load helpers, the 8-column store, and `Cols`,
// the loop that walks MR x 8 tiles over a column range and calls Kind::Tile<MR>.
// Include only from files compiled with the AVX2 flags (the *_avx2.cc glob).
//
// A Kind is a struct with `static constexpr DType kType` and
//   template <int MR> static void Tile(const QuantActs& a, int64_t i0, const uint8_t* w0,
//                                      int64_t rb, int nc, const float* bias, float* y,
//                                      int64_t ldy, const char* pf);
// computing rows i0 .. i0+MR of y for the 8 weight rows at w0 (row stride rb bytes; only
// the first nc are stored), prefetching from pf (null: none). Tile must perform, per
// output element, exactly the scalar sequence (quant_scalar.cc), so tiling never changes
// a value.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/internal.h"

namespace tessera::kernels::cpu::internal::avx2q {

constexpr int64_t kMc = 64;  // rows per chunk

inline uint16_t Ld16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// f16 scales at w0 + c * rb + off of the 8 columns, as f32 (exact, like F16ToF32). Packed
// in general-purpose registers: the vector ports are the bottleneck, not these.
inline __m256 LoadD8(const uint8_t* w0, int64_t rb, int64_t off) {
  uint64_t lo = 0, hi = 0;
#pragma GCC unroll 8
  for (int c = 0; c < 4; ++c) {
    lo |= uint64_t{Ld16(w0 + c * rb + off)} << (16 * c);
    hi |= uint64_t{Ld16(w0 + (c + 4) * rb + off)} << (16 * c);
  }
  return _mm256_cvtph_ps(_mm_set_epi64x(static_cast<int64_t>(hi), static_cast<int64_t>(lo)));
}

// Prefetches the next column group, step bytes per weight block step.
inline void Prefetch(const char*& pf, int64_t step) {
  if (pf == nullptr) return;
  for (int64_t off = 0; off < step; off += 64) _mm_prefetch(pf + off, _MM_HINT_T0);
  pf += step;
}

template <int MR>
inline void Store(const __m256* acc, int nc, const float* bias, float* y, int64_t ldy) {
  alignas(32) float b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (bias != nullptr) std::memcpy(b, bias, sizeof(float) * nc);
  const __m256 bv = _mm256_load_ps(b);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    const __m256 v = bias != nullptr ? _mm256_add_ps(acc[r], bv) : acc[r];
    if (nc == 8) {
      _mm256_storeu_ps(y + r * ldy, v);
    } else {
      alignas(32) float t[8];
      _mm256_store_ps(t, v);
      std::memcpy(y + r * ldy, t, sizeof(float) * nc);
    }
  }
}

// Loads 16 bytes of column i into the low and 16 of column i + 4 into the high half.
inline __m256i LoadPair(const uint8_t* lo, const uint8_t* hi) {
  return _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi)), 1);
}

inline __m256i Bcast16(const int8_t* p) {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// 8x8 byte transpose: rows[c] holds 8 bytes (t = 0..7) of column c; out[t] lane c
// = rows[c] byte t, widened to int32.
inline void Transpose8x8(const uint64_t* rows, __m256i* out) {
  __m128i r[8];
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) r[c] = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(rows + c));
  const __m128i a0 = _mm_unpacklo_epi8(r[0], r[1]), a1 = _mm_unpacklo_epi8(r[2], r[3]);
  const __m128i a2 = _mm_unpacklo_epi8(r[4], r[5]), a3 = _mm_unpacklo_epi8(r[6], r[7]);
  const __m128i b0 = _mm_unpacklo_epi16(a0, a1), b1 = _mm_unpackhi_epi16(a0, a1);
  const __m128i b2 = _mm_unpacklo_epi16(a2, a3), b3 = _mm_unpackhi_epi16(a2, a3);
  const __m128i c[4] = {_mm_unpacklo_epi32(b0, b2), _mm_unpackhi_epi32(b0, b2),
                        _mm_unpacklo_epi32(b1, b3), _mm_unpackhi_epi32(b1, b3)};
#pragma GCC unroll 8
  for (int t = 0; t < 4; ++t) {  // c[t] = [t'=2t: cols 0..7 | t'=2t+1: cols 0..7]
    out[2 * t] = _mm256_cvtepu8_epi32(c[t]);
    out[2 * t + 1] = _mm256_cvtepu8_epi32(_mm_srli_si128(c[t], 8));
  }
}

// Exact int32 dots of signed weights with x for the 4 column pairs (i, i + 4): weights
// given as |w| (ua: elements 0..15, ub: 16..31, |w| <= 128 as u8) and w itself (wa, wb)
// for the sign, moved onto x (|x| <= 127): int16 pairs <= 2 * 128 * 127, widened at once.
// Lanes: columns 0..3 | 4..7.
inline __m256i SignedDot(const __m256i* ua, const __m256i* ub, const __m256i* wa, const __m256i* wb,
                         __m256i xl, __m256i xh) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i p[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m256i pa = _mm256_madd_epi16(_mm256_maddubs_epi16(ua[i], _mm256_sign_epi8(xl, wa[i])), ones);
    const __m256i pb = _mm256_madd_epi16(_mm256_maddubs_epi16(ub[i], _mm256_sign_epi8(xh, wb[i])), ones);
    p[i] = _mm256_add_epi32(pa, pb);
  }
  // Per half: [p0 pair sums x2, p1 x2 | ...] then [p0, p1, p2, p3].
  return _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
}

// Per-byte shifts built from 16-bit ones: callers mask away the bits that cross bytes.
inline __m256i Srl(__m256i v, int n) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n)); }
inline __m256i Sll(__m256i v, int n) { return _mm256_sll_epi16(v, _mm_cvtsi32_si128(n)); }
// Bit `bit` of each byte of v moved to bit `to` (all other bits clear).
inline __m256i BitTo(__m256i v, int bit, int to) {
  const __m256i m = _mm256_set1_epi8(static_cast<char>(1 << to));
  return _mm256_and_si256(bit >= to ? Srl(v, bit - to) : Sll(v, to - bit), m);
}

// Q3_K's values q' (0..7) of elements 32t .. 32t + 31 of the block at blk: bits 2 (t % 4),
// 2 (t % 4) + 1 of qs[32 (t / 4) + l], and bit t of hmask[l] as bit 2 (common/quant.h).
inline __m256i Q3KValues32(const uint8_t* blk, int t) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 32 + 32 * (t / 4)));
  const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk));
  return _mm256_or_si256(_mm256_and_si256(Srl(v, 2 * (t % 4)), _mm256_set1_epi8(3)), BitTo(hm, t, 2));
}

// Q3_K's 16 scales (the 12 bytes at `scales`) as int8 sc_j - 32, byte j (Q3KScales): low 4
// bits from byte j % 8 (nibble j / 8), high 2 from byte 8 + j % 4 (bits 2 (j / 4)).
inline __m128i Q3KScales16(const uint8_t* scales) {
  uint64_t a;
  uint32_t hb;
  std::memcpy(&a, scales, 8);
  std::memcpy(&hb, scales + 8, 4);
  constexpr uint64_t k4 = 0x0F0F0F0F0F0F0F0Full;
  constexpr uint32_t k2 = 0x03030303u;
  const uint64_t hi_lo = (hb & k2) | (uint64_t{(hb >> 2) & k2} << 32);
  const uint64_t hi_hi = ((hb >> 4) & k2) | (uint64_t{(hb >> 6) & k2} << 32);
  const __m128i v = _mm_set_epi64x(static_cast<int64_t>(((a >> 4) & k4) | (hi_hi << 4)),
                                   static_cast<int64_t>((a & k4) | (hi_lo << 4)));
  return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

// IQ4_XS's 8 sub-block scales ls_t (6 bits: scales_l nibble t, scales_h bits 2t..2t+1;
// IQ4XSScale without the -32), byte t of the result, from the block at `blk`.
inline uint64_t Iq4XsScaleBytes(const uint8_t* blk) {
  uint16_t hs;
  uint32_t ls;
  std::memcpy(&hs, blk + 2, 2);
  std::memcpy(&ls, blk + 4, 4);
  uint64_t s8 = 0;
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) s8 |= uint64_t{((ls >> (4 * t)) & 0xFu) | (((hs >> (2 * t)) & 3u) << 4)} << (8 * t);
  return s8;
}

inline thread_local std::vector<uint8_t> t_tail;  // a last group of < 8 columns, zero-padded

template <class Kind>
void Cols(const QuantActs& a, const uint8_t* w, int64_t n0, int64_t n1, const float* bias,
          float* y, int64_t ldy) {
  const int64_t rb = DTypeRowBytes(Kind::kType, a.k);
  for (int64_t mb = 0; mb < a.m; mb += kMc) {
    const int64_t me = std::min(a.m, mb + kMc);
    for (int64_t j0 = n0; j0 < n1; j0 += 8) {
      const int nc = static_cast<int>(std::min<int64_t>(8, n1 - j0));
      const uint8_t* w0 = w + j0 * rb;
      if (nc < 8) {  // tiles always read 8 rows; padding rows (zero scales) are not stored
        t_tail.assign(static_cast<size_t>(8 * rb), 0);
        std::memcpy(t_tail.data(), w0, static_cast<size_t>(nc * rb));
        w0 = t_tail.data();
      }
      // Next group's weights (the 8 rows are contiguous), fetched while this one runs.
      const char* next = j0 + 8 < n1 ? reinterpret_cast<const char*>(w + (j0 + 8) * rb) : nullptr;
      const float* bj = bias != nullptr ? bias + j0 : nullptr;
      for (int64_t i0 = mb; i0 < me; i0 += 4) {
        const char* pf = i0 == mb ? next : nullptr;
        float* yt = y + i0 * ldy + j0;
        switch (std::min<int64_t>(4, me - i0)) {
          case 1: Kind::template Tile<1>(a, i0, w0, rb, nc, bj, yt, ldy, pf); break;
          case 2: Kind::template Tile<2>(a, i0, w0, rb, nc, bj, yt, ldy, pf); break;
          case 3: Kind::template Tile<3>(a, i0, w0, rb, nc, bj, yt, ldy, pf); break;
          default: Kind::template Tile<4>(a, i0, w0, rb, nc, bj, yt, ldy, pf); break;
        }
      }
    }
  }
}

}  // namespace tessera::kernels::cpu::internal::avx2q
