// Shared helpers of the AVX-512 VNNI quantized Linear kernels (quant_avx512.cc and every
// *_avx512.cc that adds weight types): loads, transposes and `Cols`, the column loop of
// the 32-element block types. Every function carries TESSERA_AVX512 (the target
// attribute), so including files need no special flags; they may only be entered when
// UseAvx512Vnni() (ops.cc).
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 false positive inside the AVX-512 intrinsic headers (_mm512_undefined_*()
// self-initializes); it is reported at the header's lines, so it precedes the includes.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/internal.h"

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

inline thread_local std::vector<uint8_t> t_tail;  // a last group of < 16 columns, zero-padded
inline thread_local std::vector<int32_t> t_off;   // -kOffset * sum(x) per (row, block)

// The 16 weight rows (row stride rb) of the column group at j0, nc of them real: blocks
// always read 16 rows, so a last group of nc < 16 is copied to t_tail with zero padding
// (zero scales; those columns are never stored).
inline const uint8_t* Group16(const uint8_t* w, int64_t j0, int nc, int64_t rb) {
  const uint8_t* w0 = w + j0 * rb;
  if (nc == kCols) return w0;
  t_tail.assign(static_cast<size_t>(kCols * rb), 0);
  std::memcpy(t_tail.data(), w0, static_cast<size_t>(nc * rb));
  return t_tail.data();
}

// Prefetches the next column group's weight block (16 rows of block_bytes), and steps pf
// to the following block; pf null: nothing to prefetch.
TESSERA_AVX512 inline void PrefetchGroup(const char*& pf, int64_t block_bytes) {
  if (pf == nullptr) return;
  for (int64_t o = 0; o < kCols * block_bytes; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
  pf += kCols * block_bytes;
}

// y[mb + r][j0 .. j0 + nc) = acc[r] (+ bias[j0 ..]) for r < rows: the nc real columns only.
TESSERA_AVX512 inline void StoreGroup(const __m512* acc, int64_t rows, int nc, const float* bias,
                                      int64_t j0, float* y, int64_t ldy, int64_t mb) {
  const __mmask16 mask = static_cast<__mmask16>((1u << nc) - 1);
  const __m512 bv = bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias + j0) : _mm512_setzero_ps();
  for (int64_t r = 0; r < rows; ++r) {
    const __m512 v = bias != nullptr ? _mm512_add_ps(acc[r], bv) : acc[r];
    _mm512_mask_storeu_ps(y + (mb + r) * ldy + j0, mask, v);
  }
}

// Linear columns [n0, n1) of all rows for a type of 32-element blocks, described by Kind:
//   kType, kBlockBytes; Unpack(w0, rb, off, wv) fills wv[0..7] with the 16 columns' block
//   as u8 (wv[t] dword c = column c's elements 4t..4t+3, the same layout Transpose16x4
//   gives), such that isum = dot(wv, x) - kOffset * sum(x); Scale16(w0, rb, off) gives d_w;
//   kMin: an f16 min m_w at off + 2, added as s = fma(m_w * d_x, float(sum(x)), s).
// Per row and block: s = fma(d_w * d_x, float(isum), s) (then the min), y = s + bias.
// Each weight block is unpacked once per kMc-row chunk and serves all its rows.
template <class Kind>
TESSERA_AVX512 void Cols(const QuantActs& a, const uint8_t* w, int64_t n0, int64_t n1,
                         const float* bias, float* y, int64_t ldy) {
  const int64_t rb = DTypeRowBytes(Kind::kType, a.k);
  const int64_t nb = a.k / 32;
  // The dots start at -kOffset * sum(x): one broadcast load per row and block.
  t_off.resize(static_cast<size_t>(a.m * nb));
  for (int64_t i = 0; i < a.m * nb; ++i) t_off[i] = -Kind::kOffset * int32_t{a.sums[i]};
  const int32_t* off0 = t_off.data();
  __m512 acc[kMc];
  for (int64_t mb = 0; mb < a.m; mb += kMc) {
    const int64_t rows = std::min(a.m, mb + kMc) - mb;
    for (int64_t j0 = n0; j0 < n1; j0 += kCols) {
      const int nc = static_cast<int>(std::min<int64_t>(kCols, n1 - j0));
      const uint8_t* w0 = Group16(w, j0, nc, rb);
      // Next group's weights (16 contiguous rows), fetched while this one runs.
      const char* pf = j0 + kCols < n1 ? reinterpret_cast<const char*>(w + (j0 + kCols) * rb) : nullptr;
      for (int64_t r = 0; r < rows; ++r) acc[r] = _mm512_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t off = b * Kind::kBlockBytes;
        PrefetchGroup(pf, Kind::kBlockBytes);
        __m512i wv[8];
        Kind::Unpack(w0, rb, off, wv);
        const __m512 dw = Kind::Scale16(w0, rb, off);
        __m512 mw = _mm512_setzero_ps();
        if constexpr (Kind::kMin) mw = LoadD16(w0, rb, off + 2);
#pragma GCC unroll 2
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t row = mb + r;
          const int8_t* xb = a.q + row * a.k + 32 * b;
          // Two independent dpbusd chains; integer sums are exact in any order.
          __m512i s0 = _mm512_set1_epi32(off0[row * nb + b]), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
          for (int t = 0; t < 4; ++t) {
            s0 = _mm512_dpbusd_epi32(s0, wv[2 * t], _mm512_set1_epi32(Ld32(xb + 8 * t)));
            s1 = _mm512_dpbusd_epi32(s1, wv[2 * t + 1], _mm512_set1_epi32(Ld32(xb + 8 * t + 4)));
          }
          const __m512i isum = _mm512_add_epi32(s0, s1);
          const __m512 dx = _mm512_set1_ps(a.d[row * nb + b]);
          acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum), acc[r]);
          if constexpr (Kind::kMin) {
            const __m512 xs = _mm512_set1_ps(static_cast<float>(a.sums[row * nb + b]));
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(mw, dx), xs, acc[r]);
          }
        }
      }
      StoreGroup(acc, rows, nc, bias, j0, y, ldy, mb);
    }
  }
}

}  // namespace tessera::kernels::cpu::internal::avx512q
