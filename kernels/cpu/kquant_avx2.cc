// AVX2 int8 Linear kernels for Q2_K, Q3_K, Q5_K, Q6_K and IQ4_XS, and the per-column
// super-block unpackers (kquant.h) that the AVX-512 kernels share.
//
// Arithmetic: the integers and the float chain of kquant_scalar.cc (bitwise equal). Per
// super-block the 8 columns of a tile are unpacked once (values in element order, int8
// scales and mins per 16, kquant.h) into an L1 buffer and reused for the tile's rows.
// Per 16-value group j and row: dot_j of the 8 columns by maddubs/madd/hadd (columns c
// and c + 4 share a vector, as in quant_avx2.cc), times sc_j by vpmulld into isc; the
// zero point (Q3_K 4, Q6_K 32) and the mins as madd of int16 (scale, scale) pairs with
// the activation sums per 16, once per super-block. IQ4_XS's signed values take
// maddubs(|v|, sign(x, v)) instead, and need no zero point.
//
// Exactness: maddubs pairs are <= 2 * 63 * 127 (unsigned values <= 63) or 2 * 127 * 127
// (|v| <= 127 of IQ4_XS), below int16 saturation; madd with ones widens them to int32
// at once; all later sums are int32 within the bounds of kquant_scalar.cc.
#include <immintrin.h>

#include <cstring>

#include "common/quant.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/kquant.h"
#include "kernels/cpu/quant_avx2_tile.h"

namespace tessera::kernels::cpu::internal {
namespace {

using namespace avx2q;  // NOLINT: the shared tiling (quant_avx2_tile.h)

inline __m256i Ld(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline void St(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
inline void St16(void* p, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); }
// 8 bytes widened to 16 by repeating each (a 32-element sub-block's value for both halves).
inline __m128i Twice(uint64_t v) {
  const __m128i x = _mm_cvtsi64_si128(static_cast<int64_t>(v));
  return _mm_unpacklo_epi8(x, x);
}

// Block offsets: Q2_K scales 0, qs 16; Q3_K hmask 0, qs 32, scales 96; Q5_K scales 4,
// qh 16, qs 48; Q6_K ql 0, qh 128, scales 192; IQ4_XS scales_h 2, scales_l 4, qs 8.
void UnpackQ2K(const uint8_t* blk, uint8_t* q, int8_t* sc, uint8_t* mn) {
  const __m256i m3 = _mm256_set1_epi8(3);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i v = Ld(blk + 16 + 32 * h);
#pragma GCC unroll 4
    for (int s = 0; s < 4; ++s) St(q + 128 * h + 32 * s, _mm256_and_si256(Srl(v, 2 * s), m3));
  }
  const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk));
  const __m128i m4 = _mm_set1_epi8(0x0F);
  St16(sc, _mm_and_si128(s, m4));
  St16(mn, _mm_and_si128(_mm_srli_epi16(s, 4), m4));
}

void UnpackQ3K(const uint8_t* blk, uint8_t* q, int8_t* sc, uint8_t*) {
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) St(q + 32 * t, Q3KValues32(blk, t));
  St16(sc, Q3KScales16(blk + 96));
}

void UnpackQ5K(const uint8_t* blk, uint8_t* q, int8_t* sc, uint8_t* mn) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i hb = Ld(blk + 16);
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles) and 2c + 1 (high)
    const __m256i v = Ld(blk + 48 + 32 * c);
    St(q + 64 * c, _mm256_or_si256(_mm256_and_si256(v, m4), BitTo(hb, 2 * c, 4)));
    St(q + 64 * c + 32, _mm256_or_si256(_mm256_and_si256(Srl(v, 4), m4), BitTo(hb, 2 * c + 1, 4)));
  }
  // The 6-bit scales and mins of Q4KScaleMin, 4 bytes at a time.
  constexpr uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
  uint32_t u[3];
  std::memcpy(u, blk + 4, 12);
  const uint32_t s_hi = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
  const uint32_t m_hi = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
  St16(sc, Twice((u[0] & k1) | (uint64_t{s_hi} << 32)));
  St16(mn, Twice((u[1] & k1) | (uint64_t{m_hi} << 32)));
}

void UnpackQ6K(const uint8_t* blk, uint8_t* q, int8_t* sc, uint8_t*) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i l0 = Ld(blk + 64 * h), l1 = Ld(blk + 64 * h + 32), hb = Ld(blk + 128 + 32 * h);
    uint8_t* o = q + 128 * h;
    // Group g: nibble g / 2 of ql[l + 32 (g % 2)], bits 2g, 2g + 1 of qh[l] as bits 4, 5.
    const __m256i m30 = _mm256_set1_epi8(0x30);
    St(o, _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(Sll(hb, 4), m30)));
    St(o + 32, _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(Sll(hb, 2), m30)));
    St(o + 64, _mm256_or_si256(_mm256_and_si256(Srl(l0, 4), m4), _mm256_and_si256(hb, m30)));
    St(o + 96, _mm256_or_si256(_mm256_and_si256(Srl(l1, 4), m4), _mm256_and_si256(Srl(hb, 2), m30)));
  }
  std::memcpy(sc, blk + 192, 16);
}

void UnpackIq4Xs(const uint8_t* blk, uint8_t* q, int8_t* sc, uint8_t*) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues)));
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {  // sub-blocks 2p (bytes 0..15) and 2p + 1 (16..31)
    const __m256i v = Ld(blk + 8 + 32 * p);
    const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(Srl(v, 4), m4);
    St(q + 64 * p, _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x20)));
    St(q + 64 * p + 32, _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x31)));
  }
  const uint64_t s8 = Iq4XsScaleBytes(blk);  // byte t = ls_t (IQ4XSScale)
  St16(sc, _mm_sub_epi8(Twice(s8), _mm_set1_epi8(32)));
}

template <DType T>
void Unpack(const uint8_t* blk, uint8_t* q, int8_t* sc, uint8_t* mn) {
  if constexpr (T == DType::kQ2_K) UnpackQ2K(blk, q, sc, mn);
  if constexpr (T == DType::kQ3_K) UnpackQ3K(blk, q, sc, mn);
  if constexpr (T == DType::kQ5_K) UnpackQ5K(blk, q, sc, mn);
  if constexpr (T == DType::kQ6_K) UnpackQ6K(blk, q, sc, mn);
  if constexpr (T == DType::kIQ4_XS) UnpackIq4Xs(blk, q, sc, mn);
}

// 16 int8 per column (b[c][0..15]) -> out[j] int32 lane c = b[c][j], sign-extended.
inline void Transpose8x16(const int8_t (*b)[16], __m256i* out) {
  uint64_t lo[8], hi[8];
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) {
    std::memcpy(&lo[c], b[c], 8);
    std::memcpy(&hi[c], b[c] + 8, 8);
  }
  Transpose8x8(lo, out);
  Transpose8x8(hi, out + 8);
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) out[j] = _mm256_srai_epi32(_mm256_slli_epi32(out[j], 24), 24);
}

// (v[2u], v[2u + 1]) as int16 pairs per lane, for madd with two sums per 16.
inline void Pairs(const __m256i* v, __m256i* out) {
  const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
#pragma GCC unroll 8
  for (int u = 0; u < 8; ++u)
    out[u] = _mm256_or_si256(_mm256_and_si256(v[2 * u], lo16), _mm256_slli_epi32(v[2 * u + 1], 16));
}

// sum_j coef_j * bs16_j per column (coef as Pairs).
inline __m256i DotSums(const __m256i* pairs, const int16_t* bs) {
  __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int u = 0; u < 8; ++u) {
    int32_t pair;
    std::memcpy(&pair, bs + 2 * u, 4);
    s = _mm256_add_epi32(s, _mm256_madd_epi16(pairs[u], _mm256_set1_epi32(pair)));
  }
  return s;
}

template <DType T>
struct KQ {
  static constexpr DType kType = T;
  static constexpr kq::Traits kTr = kq::TraitsOf(T);
  template <int MR>
  static void Tile(const QuantActs& a, int64_t i0, const uint8_t* w0, int64_t rb, int nc,
                   const float* bias, float* y, int64_t ldy, const char* pf) {
    const int64_t nb = a.k / 256, ng = a.k / 16;
    const __m256i ones = _mm256_set1_epi16(1);
    alignas(32) uint8_t q[8][256];
    alignas(16) int8_t sc[8][16];
    alignas(16) uint8_t mn[8][16];
    __m256 acc[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      Prefetch(pf, 8 * kTr.block_bytes);
      const int64_t off = b * kTr.block_bytes;
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) Unpack<T>(w0 + c * rb + off, q[c], sc[c], mn[c]);
      __m256i sc32[16];
      Transpose8x16(sc, sc32);
      __m256i isc[MR];
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) isc[r] = _mm256_setzero_si256();
      for (int j = 0; j < 16; ++j) {
        __m256i wv[4], uv[4];  // uv: the unsigned maddubs operand
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          wv[i] = LoadPair(q[i] + 16 * j, q[i + 4] + 16 * j);
          uv[i] = kTr.is_signed ? _mm256_abs_epi8(wv[i]) : wv[i];
        }
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) {
          const __m256i x = Bcast16(a.q + (i0 + r) * a.k + 256 * b + 16 * j);
          __m256i p[4];
#pragma GCC unroll 4
          for (int i = 0; i < 4; ++i) {
            const __m256i xs = kTr.is_signed ? _mm256_sign_epi8(x, wv[i]) : x;
            p[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(uv[i], xs), ones);
          }
          // Per half: [p0 p0 p1 p1] then [p0 p1 p2 p3]: columns 0..3 | 4..7.
          const __m256i dot = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
          isc[r] = _mm256_add_epi32(isc[r], _mm256_mullo_epi32(dot, sc32[j]));
        }
      }
      [[maybe_unused]] __m256i scp[8], mnp[8];
      if constexpr (kTr.zero_shift >= 0) Pairs(sc32, scp);
      if constexpr (kTr.has_min) {
        __m256i mn32[16];
        Transpose8x16(reinterpret_cast<const int8_t(*)[16]>(mn), mn32);  // mins <= 63
        Pairs(mn32, mnp);
      }
      const __m256 dw = LoadD8(w0, rb, off + kTr.d_off);
      [[maybe_unused]] const __m256 dminw = kTr.has_min ? LoadD8(w0, rb, off + kTr.dmin_off) : _mm256_setzero_ps();
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) {
        const int64_t row = i0 + r;
        [[maybe_unused]] const int16_t* bs = a.sums16 + row * ng + 16 * b;
        __m256i isum = isc[r];
        if constexpr (kTr.zero_shift >= 0)
          isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(DotSums(scp, bs), kTr.zero_shift));
        const __m256 dx = _mm256_set1_ps(a.d[row * nb + b]);
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isum), acc[r]);
        if constexpr (kTr.has_min) {
          acc[r] = _mm256_fnmadd_ps(_mm256_mul_ps(dminw, dx), _mm256_cvtepi32_ps(DotSums(mnp, bs)), acc[r]);
        }
      }
    }
    Store<MR>(acc, nc, bias, y, ldy);
  }
};

}  // namespace

kq::UnpackFn kq::UnpackAvx2(DType t) {
  switch (t) {
    case DType::kQ2_K: return UnpackQ2K;
    case DType::kQ3_K: return UnpackQ3K;
    case DType::kQ5_K: return UnpackQ5K;
    case DType::kQ6_K: return UnpackQ6K;
    case DType::kIQ4_XS: return UnpackIq4Xs;
    default: return nullptr;
  }
}

void KQuantColsAvx2(const QuantActs& a, const void* w, DType w_type, int64_t n_begin,
                    int64_t n_end, const float* bias, float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (w_type) {
    case DType::kQ2_K: return Cols<KQ<DType::kQ2_K>>(a, wb, n_begin, n_end, bias, y, ldy);
    case DType::kQ3_K: return Cols<KQ<DType::kQ3_K>>(a, wb, n_begin, n_end, bias, y, ldy);
    case DType::kQ5_K: return Cols<KQ<DType::kQ5_K>>(a, wb, n_begin, n_end, bias, y, ldy);
    case DType::kQ6_K: return Cols<KQ<DType::kQ6_K>>(a, wb, n_begin, n_end, bias, y, ldy);
    case DType::kIQ4_XS: return Cols<KQ<DType::kIQ4_XS>>(a, wb, n_begin, n_end, bias, y, ldy);
    default: break;
  }
}

}  // namespace tessera::kernels::cpu::internal
