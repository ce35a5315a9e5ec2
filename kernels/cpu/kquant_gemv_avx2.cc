// AVX2 int8 Linear for few activation rows (decode: m = 1, 2) with the 256-element weight
// types Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS: dot products straight from the packed
// super-blocks, no unpack buffer.
//
// Why a separate kernel: the tiled kernels (quant_avx2.cc, kquant_avx2.cc) unpack 8
// columns of a super-block and transpose their scales, work they repay over up to 64 rows,
// and read the 8 columns side by side (8 strided streams); at m = 1 both left decode far
// from the memory bandwidth. Here each column's 256 values are decoded in registers, 32 at
// a time, and meet the activations at once:
//   acc += madd(maddubs(q32, x32), scale16)
// with scale16 the int16 scale of each 16 or 32 values (the scale is applied per int16
// pair, so no scales are transposed); the zero points (Q3_K's 4, Q6_K's 32) and the mins
// (Q2_K per 16, Q4_K / Q5_K per 32) are madds of the int16 scales / mins with the
// activation sums per 16 / 32, once per block. Columns are read one after another.
//
// Arithmetic: the integers and the float chain of kquant_scalar.cc / quant_scalar.cc
// (bitwise equal to every other path). Per super-block and column the int32 lanes of acc
// sum to the scalar kernels' isc (and imin); 8 columns' lanes reduce with hadds into one
// vector, lane c = column c, and the float chain then runs per lane exactly as the tiled
// kernels run it: acc = fma(d_w * d_x, float(isc), acc), then for the types with mins
// acc = fnma(dmin_w * d_x, float(imin), acc), in block order; y = acc (+ bias) by Store.
//
// Exactness: maddubs pairs are <= 2 * 63 * 127 = 16002 for unsigned values <= 63 (Q6_K;
// Q5_K <= 31, Q4_K <= 15, Q3_K <= 7, Q2_K <= 3) and <= 2 * 127 * 127 = 32258 for IQ4_XS's
// |v| (sign moved onto x), below int16 saturation; madd with scales |s| <= 128 widens to
// int32 at once (<= 4.1e6 per lane). Every later add is int32 two's complement, which is
// modular: whatever the order of the hadds, a final sum within the bounds of
// kquant_scalar.cc (< 2^31) is exact.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/quant.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/quant_avx2_tile.h"

namespace tessera::kernels::cpu::internal {
namespace {

using avx2q::BitTo;
using avx2q::Sll;
using avx2q::Srl;
using avx2q::Store;

inline __m256i Ld(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i Ld128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// acc + sc16 * (the int16 pair sums of q * x): unsigned q <= 63 (see Exactness).
inline __m256i Mac(__m256i acc, __m256i q, __m256i x, __m256i sc16) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), sc16));
}
// The same for signed q (|q| <= 127): |q| times x with q's sign.
inline __m256i MacSigned(__m256i acc, __m256i q, __m256i x, __m256i sc16) {
  const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(x, q));
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p, sc16));
}
// int16 lane t of v (the same 8 in each 128-bit half) in all 16 lanes.
inline __m256i Lane16(__m256i v, int t) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<int16_t>(((2 * t + 1) << 8) | (2 * t))));
}
// 8 bytes (u8) as int16 in lanes 0..7 of both halves.
inline __m256i Bytes16(uint64_t v) {
  return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(v))));
}
// 16 int8 scales sc[0..15] -> int16 lanes 0..7 = sc[2k], lanes 8..15 = sc[2k + 1].
inline __m256i PairScale(__m128i sc, int k) {
  const __m128i sel = _mm_set_epi64x(static_cast<int64_t>(0x0101010101010101ull * (2 * k + 1)),
                                     static_cast<int64_t>(0x0101010101010101ull * (2 * k)));
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, sel));
}

// Q4_K's (and Q5_K's) 6-bit scales and mins as 8 bytes each (Q4KScaleMin), 4 at a time.
inline void ScaleMin8(const uint8_t* scales, uint64_t* sc, uint64_t* mn) {
  constexpr uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
  uint32_t u[3];
  std::memcpy(u, scales, 12);
  const uint32_t s_hi = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
  const uint32_t m_hi = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
  *sc = (u[0] & k1) | (uint64_t{s_hi} << 32);
  *mn = (u[1] & k1) | (uint64_t{m_hi} << 32);
}

// The activations of MR rows at one super-block: xq (256 int8), the sums per 16 and per 32.
template <int MR>
struct Acts {
  const int8_t* x[MR];
  const int16_t* bs16[MR];
  const int16_t* bs32[MR];
};

// imin lanes of the mins (Q4_K / Q5_K): sum_t m_t * bs32_t (lanes 4..7 zero).
template <int MR>
inline void Mins32(uint64_t mn, const Acts<MR>& a, __m256i* imin) {
  const __m256i m16 = _mm256_zextsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(mn))));
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) imin[r] = _mm256_madd_epi16(m16, _mm256_zextsi128_si256(Ld128(a.bs32[r])));
}

// Each type: kType, kMin (a dmin fma), kD / kDmin (byte offsets of the f16 d / dmin), and
// Block<MR>(blk, acts, isc, imin): int32 lanes summing to the scalar kernels' isc / imin.
// Q4_K, and Q5_K (kFifth: a fifth bit per value from qh; qs 32 bytes later).
template <bool kFifth>
struct GQ45K {
  static constexpr DType kType = kFifth ? DType::kQ5_K : DType::kQ4_K;
  static constexpr bool kMin = true;
  static constexpr int kD = 0, kDmin = 2;
  template <int MR>
  static void Block(const uint8_t* blk, const Acts<MR>& a, __m256i* isc, __m256i* imin) {
    uint64_t sc, mn;
    ScaleMin8(blk + 4, &sc, &mn);
    const __m256i sc16 = Bytes16(sc), m4 = _mm256_set1_epi8(0x0F);
    [[maybe_unused]] const __m256i hb = kFifth ? Ld(blk + 16) : _mm256_setzero_si256();  // qh
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {  // sub-blocks 2c (low nibbles of qs[32c..]) and 2c + 1 (high)
      const __m256i v = Ld(blk + (kFifth ? 48 : 16) + 32 * c);
      __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(Srl(v, 4), m4);
      if constexpr (kFifth) {  // bit t of qh[l] is bit 4 of element 32t + l
        lo = _mm256_or_si256(lo, BitTo(hb, 2 * c, 4));
        hi = _mm256_or_si256(hi, BitTo(hb, 2 * c + 1, 4));
      }
      const __m256i slo = Lane16(sc16, 2 * c), shi = Lane16(sc16, 2 * c + 1);
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) {
        isc[r] = Mac(isc[r], lo, Ld(a.x[r] + 64 * c), slo);
        isc[r] = Mac(isc[r], hi, Ld(a.x[r] + 64 * c + 32), shi);
      }
    }
    Mins32<MR>(mn, a, imin);
  }
};

struct GQ6K {
  static constexpr DType kType = DType::kQ6_K;
  static constexpr bool kMin = false;
  static constexpr int kD = 208, kDmin = 0;
  template <int MR>
  static void Block(const uint8_t* blk, const Acts<MR>& a, __m256i* isc, __m256i*) {
    const __m128i sc = Ld128(blk + 192);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = Ld(blk + 64 * h), l1 = Ld(blk + 64 * h + 32), hb = Ld(blk + 128 + 32 * h);
      // Group g of the half (elements 128h + 32g..): nibble g / 2 of ql[l + 32 (g % 2)],
      // bits 2g, 2g + 1 of qh[l] as bits 4, 5 (common/quant.h).
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(Sll(hb, 4), m30)),
          _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(Sll(hb, 2), m30)),
          _mm256_or_si256(_mm256_and_si256(Srl(l0, 4), m4), _mm256_and_si256(hb, m30)),
          _mm256_or_si256(_mm256_and_si256(Srl(l1, 4), m4), _mm256_and_si256(Srl(hb, 2), m30))};
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        const __m256i s = PairScale(sc, 4 * h + g);  // groups of 16: 8h + 2g, 8h + 2g + 1
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) isc[r] = Mac(isc[r], q[g], Ld(a.x[r] + 128 * h + 32 * g), s);
      }
    }
    // The zero point: isc -= 32 * sum_j sc_j * bs16_j (|sc_j * bs16_j| <= 128 * 2032).
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
      isc[r] = _mm256_sub_epi32(isc[r], _mm256_slli_epi32(_mm256_madd_epi16(sc16, Ld(a.bs16[r])), 5));
  }
};

struct GIQ4XS {
  static constexpr DType kType = DType::kIQ4_XS;
  static constexpr bool kMin = false;
  static constexpr int kD = 0, kDmin = 0;
  template <int MR>
  static void Block(const uint8_t* blk, const Acts<MR>& a, __m256i* isc, __m256i*) {
    const uint64_t s8 = avx2q::Iq4XsScaleBytes(blk);  // byte t = ls_t (IQ4XSScale), 0..63
    const __m256i sc16 = _mm256_sub_epi16(Bytes16(s8), _mm256_set1_epi16(32));  // ls_t - 32
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i table = _mm256_broadcastsi128_si256(Ld128(kIq4NlValues));
#pragma GCC unroll 4
    for (int p = 0; p < 4; ++p) {  // sub-blocks 2p (qs bytes 0..15) and 2p + 1 (16..31)
      const __m256i v = Ld(blk + 8 + 32 * p);
      const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(Srl(v, 4), m4);
      // Sub-block 2p: low nibbles of bytes 0..15 then their high nibbles; 2p + 1 alike.
      const __m256i q0 = _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x20));
      const __m256i q1 = _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x31));
      const __m256i s0 = Lane16(sc16, 2 * p), s1 = Lane16(sc16, 2 * p + 1);
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) {
        isc[r] = MacSigned(isc[r], q0, Ld(a.x[r] + 64 * p), s0);
        isc[r] = MacSigned(isc[r], q1, Ld(a.x[r] + 64 * p + 32), s1);
      }
    }
  }
};

struct GQ2K {
  static constexpr DType kType = DType::kQ2_K;
  static constexpr bool kMin = true;
  static constexpr int kD = 80, kDmin = 82;
  template <int MR>
  static void Block(const uint8_t* blk, const Acts<MR>& a, __m256i* isc, __m256i* imin) {
    const __m128i raw = Ld128(blk), m4 = _mm_set1_epi8(0x0F);
    const __m128i sc = _mm_and_si128(raw, m4);  // sc_j; the mins m_j in the high nibbles
    const __m256i m3 = _mm256_set1_epi8(3);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256i v = Ld(blk + 16 + 32 * h);
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {  // elements 128h + 32g + l: bits 2g, 2g + 1 of qs[32h + l]
        const __m256i q = _mm256_and_si256(Srl(v, 2 * g), m3);
        const __m256i s = PairScale(sc, 4 * h + g);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) isc[r] = Mac(isc[r], q, Ld(a.x[r] + 128 * h + 32 * g), s);
      }
    }
    const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), m4));
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) imin[r] = _mm256_madd_epi16(mn16, Ld(a.bs16[r]));  // m_j * bs16_j
  }
};

struct GQ3K {
  static constexpr DType kType = DType::kQ3_K;
  static constexpr bool kMin = false;
  static constexpr int kD = 108, kDmin = 0;
  template <int MR>
  static void Block(const uint8_t* blk, const Acts<MR>& a, __m256i* isc, __m256i*) {
    const __m128i sc = avx2q::Q3KScales16(blk + 96);  // sc_j - 32
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) {  // elements 32t.., groups of 16 2t and 2t + 1
      const __m256i q = avx2q::Q3KValues32(blk, t), s = PairScale(sc, t);
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) isc[r] = Mac(isc[r], q, Ld(a.x[r] + 32 * t), s);
    }
    // The zero point: isc -= 4 * sum_j (sc_j - 32) * bs16_j.
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r)
      isc[r] = _mm256_sub_epi32(isc[r], _mm256_slli_epi32(_mm256_madd_epi16(sc16, Ld(a.bs16[r])), 2));
  }
};

// v[c]'s lanes summed, in lane c (int32, modular: see Exactness).
inline __m256i Reduce8(const __m256i* v) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  // a: per half [c0 c1 c2 c3], b: [c4 .. c7]; the halves add.
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// f16 at w0 + c * rb + off of the 8 columns (c < nc; 0 beyond), as f32 (exact).
inline __m256 LoadD8(const uint8_t* w0, int64_t rb, int nc, int64_t off) {
  alignas(16) uint16_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int c = 0; c < nc; ++c) std::memcpy(&h[c], w0 + c * rb + off, 2);
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
}

constexpr int64_t kAhead = 1024;  // bytes prefetched ahead of the block being read

// Per-thread integer lanes of one 8-column group: [row][block][column], isc then imin;
// 2 * MR * (k / 256) * 256 bytes (57 KiB at k = 14336, m = 2), kept for the next call.
struct alignas(32) Lanes {
  int32_t v[8];
};
inline thread_local std::vector<Lanes> t_lanes;

// Rows i0 .. i0 + MR of y, columns [n0, n1), 8 columns at a time in two phases:
//  1. the integers, ONE COLUMN AFTER ANOTHER: the group's weights are read front to back,
//     one sequential stream the hardware prefetcher follows at full bandwidth (8 columns
//     side by side, as the tiled kernels read them, are 8 strided streams);
//  2. the float chain per block, 8 columns (lanes) at a time, from the stored lanes.
// Lanes of columns past nc stay zero and are not stored.
template <class T, int MR>
void Rows(const QuantActs& a, const uint8_t* w, int64_t i0, int64_t n0, int64_t n1, const float* bias, float* y,
          int64_t ldy) {
  const int64_t rb = DTypeRowBytes(T::kType, a.k), bb = DTypeBlockBytes(T::kType), nb = a.k / 256;
  const int64_t per_row = nb * 8, half = MR * per_row;  // lanes of isc; imin after them
  t_lanes.resize(static_cast<size_t>(2 * half));
  auto* lanes = reinterpret_cast<__m256i*>(t_lanes.data());
  for (int64_t j0 = n0; j0 < n1; j0 += 8) {
    const int nc = static_cast<int>(std::min<int64_t>(8, n1 - j0));
    const uint8_t* w0 = w + j0 * rb;
    for (int c = 0; c < 8; ++c) {
      for (int64_t b = 0; b < nb; ++b) {
        __m256i s[MR], m[MR];
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) s[r] = m[r] = _mm256_setzero_si256();
        if (c < nc) {
          Acts<MR> xa;
#pragma GCC unroll 4
          for (int r = 0; r < MR; ++r) {
            xa.x[r] = a.q + (i0 + r) * a.k + 256 * b;
            xa.bs16[r] = a.sums16 != nullptr ? a.sums16 + (i0 + r) * (a.k / 16) + 16 * b : nullptr;
            xa.bs32[r] = a.sums + (i0 + r) * (a.k / 32) + 8 * b;
          }
          const uint8_t* blk = w0 + c * rb + b * bb;
          // Ahead in the stream (a few blocks): the hardware prefetcher alone leaves
          // the single-thread read rate well below the machine's.
          for (int64_t o = 0; o < bb; o += 64) _mm_prefetch(reinterpret_cast<const char*>(blk) + kAhead + o, _MM_HINT_T0);
          T::template Block<MR>(blk, xa, s, m);
        }
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) {
          lanes[r * per_row + b * 8 + c] = s[r];
          if constexpr (T::kMin) lanes[half + r * per_row + b * 8 + c] = m[r];
        }
      }
    }
    __m256 acc[MR];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const __m256 dw = LoadD8(w0, rb, nc, b * bb + T::kD);
      [[maybe_unused]] const __m256 dminw = T::kMin ? LoadD8(w0, rb, nc, b * bb + T::kDmin) : _mm256_setzero_ps();
#pragma GCC unroll 4
      for (int r = 0; r < MR; ++r) {
        const __m256 dx = _mm256_set1_ps(a.d[(i0 + r) * nb + b]);
        const __m256i isc = Reduce8(lanes + r * per_row + b * 8);
        acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(isc), acc[r]);
        if constexpr (T::kMin) {
          const __m256i imin = Reduce8(lanes + half + r * per_row + b * 8);
          acc[r] = _mm256_fnmadd_ps(_mm256_mul_ps(dminw, dx), _mm256_cvtepi32_ps(imin), acc[r]);
        }
      }
    }
    Store<MR>(acc, nc, bias != nullptr ? bias + j0 : nullptr, y + i0 * ldy + j0, ldy);
  }
}

template <class T>
void Gemv(const QuantActs& a, const void* w, int64_t n0, int64_t n1, const float* bias, float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  for (int64_t i0 = 0; i0 < a.m; i0 += kQuantGemvMaxM) {
    switch (std::min<int64_t>(kQuantGemvMaxM, a.m - i0)) {
      case 1: Rows<T, 1>(a, wb, i0, n0, n1, bias, y, ldy); break;
      default: Rows<T, 2>(a, wb, i0, n0, n1, bias, y, ldy); break;
    }
  }
}

}  // namespace

void QuantGemvColsAvx2(const QuantActs& a, const void* w, DType w_type, int64_t n_begin, int64_t n_end,
                       const float* bias, float* y, int64_t ldy) {
  switch (w_type) {
    case DType::kQ4_K: return Gemv<GQ45K<false>>(a, w, n_begin, n_end, bias, y, ldy);
    case DType::kQ5_K: return Gemv<GQ45K<true>>(a, w, n_begin, n_end, bias, y, ldy);
    case DType::kQ6_K: return Gemv<GQ6K>(a, w, n_begin, n_end, bias, y, ldy);
    case DType::kIQ4_XS: return Gemv<GIQ4XS>(a, w, n_begin, n_end, bias, y, ldy);
    case DType::kQ2_K: return Gemv<GQ2K>(a, w, n_begin, n_end, bias, y, ldy);
    case DType::kQ3_K: return Gemv<GQ3K>(a, w, n_begin, n_end, bias, y, ldy);
    default: break;
  }
}

}  // namespace tessera::kernels::cpu::internal
