// AVX-512 VNNI int8 Linear kernels for Q2_K, Q3_K, Q5_K, Q6_K and IQ4_XS. Entered only when
// UseAvx512Vnni() (ops.cc); every function carries the target attribute.
//
// Arithmetic: the integers and the float chain of kquant_scalar.cc (bitwise equal to the
// scalar and AVX2 kernels). Per 16-column group and super-block, each column is unpacked
// (kquant.h, the AVX2 unpackers) into an L1 buffer; per 16-value group j the 16 columns
// are transposed once (Transpose16x4: dword c = 4 values of column c) and serve every row
// of the chunk: dot_j by 4 vpdpbusd (u8 weights x s8 activations, exact int32, no
// saturation), times sc_j by vpmulld into isc. IQ4_XS's int8 values enter vpdpbusd as
// v + 128 (xor 0x80) with zero point 128, like Q6_K's 32 and Q3_K's 4: isc -= z * sum_j
// sc_j bs16_j (vpdpwssd on int16 scale pairs); the mins likewise. Bounds in
// kquant_scalar.cc (the v + 128 form stays below 2^31).
#include "kernels/cpu/quant_avx512_tile.h"  // first: it silences a GCC false positive in immintrin.h

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/kquant.h"

namespace tessera::kernels::cpu::internal {
namespace {

using namespace avx512q;  // NOLINT: the shared helpers (quant_avx512_tile.h)

thread_local std::vector<uint8_t> t_tail;  // a last group of < 16 columns, zero-padded

// 16 int8 per column (b[c][0..15], 16 columns) -> out[j] int32 lane c = b[c][j], sign-extended.
TESSERA_AVX512 inline void Transpose16x16(const int8_t (*b)[16], __m512i* out) {
  __m512i d[4];  // d[t] dword c = bytes 4t..4t+3 of column c
  Transpose16x4(reinterpret_cast<const uint8_t*>(b), 16, d);
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    out[j] = _mm512_srai_epi32(_mm512_sll_epi32(d[j / 4], _mm_cvtsi32_si128(24 - 8 * (j % 4))), 24);
  }
}

// (v[2u], v[2u + 1]) as int16 pairs per lane.
TESSERA_AVX512 inline void Pairs16(const __m512i* v, __m512i* out) {
  const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
#pragma GCC unroll 8
  for (int u = 0; u < 8; ++u)
    out[u] = _mm512_or_si512(_mm512_and_si512(v[2 * u], lo16), _mm512_slli_epi32(v[2 * u + 1], 16));
}

// sum_j coef_j * bs16_j per column (coef as Pairs16).
TESSERA_AVX512 inline __m512i DotSums16(const __m512i* pairs, const int16_t* bs) {
  __m512i s = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int u = 0; u < 8; ++u) {
    int32_t pair;
    std::memcpy(&pair, bs + 2 * u, 4);
    s = _mm512_dpwssd_epi32(s, pairs[u], _mm512_set1_epi32(pair));
  }
  return s;
}

template <DType T>
TESSERA_AVX512 void ColsK(const QuantActs& a, const uint8_t* w, int64_t n0, int64_t n1,
                          const float* bias, float* y, int64_t ldy) {
  constexpr kq::Traits kTr = kq::TraitsOf(T);
  // vpdpbusd multiplies unsigned weights: signed ones are offset by 128.
  constexpr int kZeroShift = kTr.is_signed ? 7 : kTr.zero_shift;
  const kq::UnpackFn unpack = kq::UnpackAvx2(T);
  const int64_t rb = DTypeRowBytes(T, a.k);
  const int64_t nb = a.k / 256, ng = a.k / 16;
  [[maybe_unused]] const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  alignas(64) uint8_t q[kCols][256];
  alignas(64) int8_t sc[kCols][16];
  alignas(64) uint8_t mn[kCols][16];
  __m512 acc[kMc];
  __m512i isc[kMc];
  for (int64_t mb = 0; mb < a.m; mb += kMc) {
    const int64_t rows = std::min(a.m, mb + kMc) - mb;
    for (int64_t j0 = n0; j0 < n1; j0 += kCols) {
      const int nc = static_cast<int>(std::min<int64_t>(kCols, n1 - j0));
      const uint8_t* w0 = w + j0 * rb;
      if (nc < kCols) {  // blocks always read 16 rows; padding rows (zero scales) not stored
        t_tail.assign(static_cast<size_t>(kCols * rb), 0);
        std::memcpy(t_tail.data(), w0, static_cast<size_t>(nc * rb));
        w0 = t_tail.data();
      }
      // Next group's weights (16 contiguous rows), fetched while this one runs.
      const char* pf = j0 + kCols < n1 ? reinterpret_cast<const char*>(w + (j0 + kCols) * rb) : nullptr;
      for (int64_t r = 0; r < rows; ++r) acc[r] = _mm512_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t off = b * kTr.block_bytes;
        PrefetchGroup(pf, kTr.block_bytes);
        for (int c = 0; c < kCols; ++c) unpack(w0 + c * rb + off, q[c], sc[c], mn[c]);
        __m512i sc32[16];
        Transpose16x16(sc, sc32);
        for (int j = 0; j < 16; ++j) {
          __m512i wv[4];
          Transpose16x4(&q[0][16 * j], 256, wv);
          if constexpr (kTr.is_signed) {
#pragma GCC unroll 4
            for (int t = 0; t < 4; ++t) wv[t] = _mm512_xor_si512(wv[t], flip);
          }
#pragma GCC unroll 2
          for (int64_t r = 0; r < rows; ++r) {
            const int8_t* xb = a.q + (mb + r) * a.k + 256 * b + 16 * j;
            // Two independent dpbusd chains; integer sums are exact in any order.
            __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[0], _mm512_set1_epi32(Ld32(xb)));
            __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[1], _mm512_set1_epi32(Ld32(xb + 4)));
            d0 = _mm512_dpbusd_epi32(d0, wv[2], _mm512_set1_epi32(Ld32(xb + 8)));
            d1 = _mm512_dpbusd_epi32(d1, wv[3], _mm512_set1_epi32(Ld32(xb + 12)));
            const __m512i p = _mm512_mullo_epi32(_mm512_add_epi32(d0, d1), sc32[j]);
            isc[r] = j == 0 ? p : _mm512_add_epi32(isc[r], p);
          }
        }
        [[maybe_unused]] __m512i scp[8], mnp[8];
        if constexpr (kZeroShift >= 0) Pairs16(sc32, scp);
        if constexpr (kTr.has_min) {
          __m512i mn32[16];
          Transpose16x16(reinterpret_cast<const int8_t(*)[16]>(mn), mn32);  // mins <= 63
          Pairs16(mn32, mnp);
        }
        const __m512 dw = LoadD16(w0, rb, off + kTr.d_off);
        [[maybe_unused]] const __m512 dminw = kTr.has_min ? LoadD16(w0, rb, off + kTr.dmin_off) : _mm512_setzero_ps();
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t row = mb + r;
          [[maybe_unused]] const int16_t* bs = a.sums16 + row * ng + 16 * b;
          __m512i isum = isc[r];
          if constexpr (kZeroShift >= 0)
            isum = _mm512_sub_epi32(isum, _mm512_slli_epi32(DotSums16(scp, bs), kZeroShift));
          const __m512 dx = _mm512_set1_ps(a.d[row * nb + b]);
          acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(isum), acc[r]);
          if constexpr (kTr.has_min)
            acc[r] = _mm512_fnmadd_ps(_mm512_mul_ps(dminw, dx), _mm512_cvtepi32_ps(DotSums16(mnp, bs)), acc[r]);
        }
      }
      StoreGroup(acc, rows, nc, bias, j0, y, ldy, mb);
    }
  }
}

}  // namespace

void KQuantColsAvx512(const QuantActs& a, const void* w, DType w_type, int64_t n_begin,
                      int64_t n_end, const float* bias, float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (w_type) {
    case DType::kQ2_K: return ColsK<DType::kQ2_K>(a, wb, n_begin, n_end, bias, y, ldy);
    case DType::kQ3_K: return ColsK<DType::kQ3_K>(a, wb, n_begin, n_end, bias, y, ldy);
    case DType::kQ5_K: return ColsK<DType::kQ5_K>(a, wb, n_begin, n_end, bias, y, ldy);
    case DType::kQ6_K: return ColsK<DType::kQ6_K>(a, wb, n_begin, n_end, bias, y, ldy);
    case DType::kIQ4_XS: return ColsK<DType::kIQ4_XS>(a, wb, n_begin, n_end, bias, y, ldy);
    default: break;
  }
}

}  // namespace tessera::kernels::cpu::internal
