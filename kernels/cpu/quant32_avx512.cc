// AVX-512 VNNI int8 Linear for the 32-element types Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4.
// Entered only when UseAvx512Vnni() (ops.cc); every function carries the target attribute.
//
// Arithmetic: exactly the per-element sequence of quant32_scalar.cc (bitwise equal to the
// scalar and AVX2 kernels). vpdpbusd sums 4 u8 x s8 products into int32 without
// saturation, so each block dot is the exact integer
//   isum = dot(u, x) - kOffset * sum(x),  u = v + kOffset unsigned:
//   Q4_1, Q5_1: u = v (0..15, 0..31), kOffset 0 (their min term is the second fma)
//   Q5_0: u = v + 16 (0..31);  IQ4_NL: u = v + 128 (1..241);  MXFP4: u = v + 12 (0..24)
// (|dot| < 32 * 241 * 127 < 2^20), table types looked up with vpshufb.
//
// Layout and loop: avx512q::Cols, as for Q8_0/Q4_0 (quant_avx512.cc): 16 OUTPUT COLUMNS per
// __m512 (lane c = column c); per weight block the 16 columns are transposed once into 8
// vectors of "4 consecutive k of column c in dword c", which serve every row of a kMc-row
// chunk (8 vpdpbusd per row, no horizontal reduction). Results depend on neither tile
// shape nor chunking.
#include "kernels/cpu/quant_avx512_tile.h"  // first: it silences a GCC false positive in immintrin.h

#include <cstdint>

#include "common/quant.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/quant32.h"

namespace tessera::kernels::cpu::internal {
namespace {

using namespace avx512q;  // NOLINT: the shared helpers (quant_avx512_tile.h)

// The 16 columns' nibbles of the qs bytes at qs_off: wv[t] pairs with x bytes 4t..4t+3
// (elements 4t..4t+3: low nibbles for t < 4, high nibbles of the same bytes for t >= 4).
TESSERA_AVX512 inline void Nibbles16(const uint8_t* w0, int64_t rb, int64_t qs_off, __m512i* wv) {
  __m512i v[4];
  Transpose16x4(w0 + qs_off, rb, v);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 4
  for (int t = 0; t < 4; ++t) {
    wv[t] = _mm512_and_si512(v[t], m4);
    wv[t + 4] = _mm512_and_si512(_mm512_srli_epi16(v[t], 4), m4);
  }
}

// Adds 16 where the fifth bit is set: element e = 4t + j of wv[t] (byte j of each dword)
// takes bit e of the column's little-endian u32 qh at qh_off, i.e. bit 4 (t % 2) + j of
// qh byte t / 2.
TESSERA_AVX512 inline void AddHighBits16(const uint8_t* w0, int64_t rb, int64_t qh_off, __m512i* wv) {
  __m512i q[4];
  Transpose16x4(w0 + qh_off, rb, q);  // q[0] dword c = qh of column c (q[1..3] unused)
  const __m512i dword_base = _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0);
  const __m512i bits[2] = {_mm512_set1_epi32(0x08040201), _mm512_set1_epi32(static_cast<int>(0x80402010u))};
  const __m512i b16 = _mm512_set1_epi8(16);
#pragma GCC unroll 8
  for (int t = 0; t < 8; ++t) {
    const __m512i byte = _mm512_shuffle_epi8(q[0], _mm512_add_epi8(dword_base, _mm512_set1_epi8(static_cast<char>(t / 2))));
    const __mmask64 set = _mm512_test_epi8_mask(byte, bits[t % 2]);
    wv[t] = _mm512_mask_add_epi8(wv[t], set, wv[t], b16);
  }
}

// f32 scales 2^(e - 128) (E8M0ToF32Half) of the 16 columns' E8M0 bytes at off.
TESSERA_AVX512 inline __m512 LoadE16(const uint8_t* w0, int64_t rb, int64_t off) {
  alignas(16) uint8_t e8[kCols];
#pragma GCC unroll 16
  for (int c = 0; c < kCols; ++c) e8[c] = w0[c * rb + off];
  const __m512i e = _mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(e8)));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
  const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);  // e = 0, 1
  const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
  return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, normal, sub));
}

TESSERA_AVX512 inline __m512i Table(const Table16& t) {
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(t.b)));
}

// One type's Kind for avx512q::Cols (quant_avx512_tile.h).
template <DType T>
struct Kind32 {
  static constexpr Layout32 kL = LayoutOf(T);
  static constexpr DType kType = T;
  static constexpr int64_t kBlockBytes = kL.bytes;
  static constexpr bool kMin = kL.min;
  static constexpr int32_t kOffset =
      T == DType::kQ5_0 ? 16 : T == DType::kIQ4_NL ? kIq4Offset : T == DType::kMXFP4 ? kMxfp4Offset : 0;

  TESSERA_AVX512 static void Unpack(const uint8_t* w0, int64_t rb, int64_t off, __m512i* wv) {
    Nibbles16(w0, rb, off + kL.qs, wv);
    if constexpr (kL.qh >= 0) AddHighBits16(w0, rb, off + kL.qh, wv);
    if constexpr (T == DType::kIQ4_NL || T == DType::kMXFP4) {
      const __m512i table = Table(T == DType::kIQ4_NL ? kIq4Table128 : kMxfp4Table);
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) wv[t] = _mm512_shuffle_epi8(table, wv[t]);
    }
  }
  TESSERA_AVX512 static __m512 Scale16(const uint8_t* w0, int64_t rb, int64_t off) {
    if constexpr (kL.e8m0) {
      return LoadE16(w0, rb, off);
    } else {
      return LoadD16(w0, rb, off);
    }
  }
};

}  // namespace

void LinearQuant32ColsAvx512(const QuantActs& a, const void* w, DType w_type, int64_t n_begin,
                             int64_t n_end, const float* bias, float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  Visit32(w_type, [&](auto t) { Cols<Kind32<decltype(t)::value>>(a, wb, n_begin, n_end, bias, y, ldy); });
}

}  // namespace tessera::kernels::cpu::internal
