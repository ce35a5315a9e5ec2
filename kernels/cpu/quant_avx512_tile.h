// Shared helpers of the AVX-512 VNNI quantized Linear kernels (quant_avx512.cc and every
// *_avx512.cc that adds weight types). Every function carries TESSERA_AVX512 (the target
// attribute), so including files need no special flags; they may only be entered when
// UseAvx512Vnni() (ops.cc).
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 false positive inside the AVX-512 intrinsic headers (_mm512_undefined_*()
// self-initializes); it is reported at the header's lines, so it precedes the includes.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#define TESSERA_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace tessera::kernels::cpu::internal::avx512q {

constexpr int64_t kMc = 64;  // rows per chunk (accumulators: kMc x 64 bytes)
constexpr int kCols = 16;    // output columns per vector

inline uint16_t Ld16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

inline int32_t Ld32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// f16 scales at w0 + c * rb + off of the 16 columns, as f32 (exact, like F16ToF32).
TESSERA_AVX512 inline __m512 LoadD16(const uint8_t* w0, int64_t rb, int64_t off) {
  uint64_t q[4] = {0, 0, 0, 0};
#pragma GCC unroll 16
  for (int c = 0; c < kCols; ++c) q[c / 4] |= uint64_t{Ld16(w0 + c * rb + off)} << (16 * (c % 4));
  return _mm512_cvtph_ps(_mm256_set_epi64x(static_cast<int64_t>(q[3]), static_cast<int64_t>(q[2]),
                                           static_cast<int64_t>(q[1]), static_cast<int64_t>(q[0])));
}

// 16 bytes of each of 16 columns (column c at p + c * rb) -> out[t] dword c = column
// c's dword t (t = 0..3).
TESSERA_AVX512 inline void Transpose16x4(const uint8_t* p, int64_t rb, __m512i* out) {
  __m512i z[4];  // z[i] 128-bit lane j = column i + 4j
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i * rb)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + (i + 4) * rb)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + (i + 8) * rb)), 2);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + (i + 12) * rb)), 3);
    z[i] = v;
  }
  // 4x4 dword transpose inside each 128-bit lane: lane j, dword i of out[t] = z[i] lane j dword t.
  const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
  out[0] = _mm512_unpacklo_epi64(t0, t2);
  out[1] = _mm512_unpackhi_epi64(t0, t2);
  out[2] = _mm512_unpacklo_epi64(t1, t3);
  out[3] = _mm512_unpackhi_epi64(t1, t3);
}

}  // namespace tessera::kernels::cpu::internal::avx512q
