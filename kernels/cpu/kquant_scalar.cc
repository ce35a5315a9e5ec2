// Portable int8 Linear kernels for the 256-element weight types Q2_K, Q3_K, Q5_K, Q6_K and
// IQ4_XS (layouts: common/quant.h). This file DEFINES their arithmetic; kquant_avx2.cc and
// kquant_avx512.cc compute the same integers and the same float sequence, so all three
// paths are bitwise equal.
//
// Activations: QuantizeActs with 256-value blocks (one f32 scale d_x per block, x ~ d_x *
// xq, xq int8 in [-127, 127]: llama.cpp's Q8_K idea); bs16_j and bs32_t are the sums of
// xq over the block's 16-value group j and 32-value group t (QuantActs::sums16, ::sums).
// Per output element y[i][j]: s = 0, then per weight super-block b in k order, with d and
// dmin the block's f16 scales as f32 and dot_j(v, xq) = sum of v[e] * xq[e] over group j:
//   Q2_K   16 groups of 16, sc_j = scales[j] & 15, m_j = scales[j] >> 4, q 0..3:
//            isc = sum_j sc_j * dot_j(q);   imin = sum_j m_j * bs16_j
//            s = fma(d * d_x, float(isc), s);   s = fma(-(dmin * d_x), float(imin), s)
//   Q5_K   8 groups of 32, 6-bit sc_t and m_t (as Q4_K), q 0..31:
//            isc = sum_t sc_t * dot_t(q);   imin = sum_t m_t * bs32_t;   the same two fmas
//   Q3_K   16 groups of 16, scale sc_j - 32 (-32..31), q' = low2 | hbit << 2 (0..7) whose
//          value is q' - 4:
//            isum = sum_j (sc_j - 32) * (dot_j(q') - 4 * bs16_j);   s = fma(d * d_x, float(isum), s)
//   Q6_K   16 groups of 16, int8 sc_j, q 0..63 whose value is q - 32:
//            isum = sum_j sc_j * (dot_j(q) - 32 * bs16_j);   s = fma(d * d_x, float(isum), s)
//   IQ4_XS 8 groups of 32, 6-bit ls_t, value v = kIq4NlValues[nibble] (-127..113):
//            isum = sum_t (ls_t - 32) * dot_t(v);   s = fma(d * d_x, float(isum), s)
// then y = s + bias[j].
//
// Exact int32 (|xq| <= 127, |bs16| <= 2032, |bs32| <= 4064); the bounds also cover the
// SIMD kernels' regrouping (scaled dots of the raw q, minus the scaled zero point term):
//   Q2_K   |dot_j| <= 6096: |isc| <= 16*15*6096 = 1.5e6, |imin| <= 16*15*2032 = 4.9e5
//   Q3_K   |isum| <= 16*32*(16*4*127) = 4.2e6; sum_j |sc * dot_j(q')| <= 16*32*14224 = 7.3e6
//   Q5_K   |dot_t| <= 32*31*127: |isc| <= 8*63*125984 = 6.4e7, |imin| <= 8*63*4064 = 2.1e6
//   Q6_K   |isum| <= 16*128*(16*32*127) = 1.4e8; sum_j |sc * dot_j(q)| <= 16*128*128016 = 2.7e8
//   IQ4_XS |isum| <= 8*32*(32*127*127) = 1.4e8; VNNI's v + 128 form: <= 16*32*518160 = 2.7e8
// all below 2^31 = 2.1e9.
// Error: the integers are exact; float(i) rounds only above 2^24, d * d_x once, each fma
// once. With F fmas per row (nb, or 2 nb with mins) and T = the sum over blocks of
// |d d_x isc| (+ |dmin d_x imin|), y is within about (F + 3) 2^-24 T of the float64 product
// of the quantize-dequantized activations with exact weights, and DequantizeRow's f32
// weights are within 2 2^-24 of exact per element: so within (F + 5) 2^-24 T of the
// float64 product with DequantizeRow's weights (tests/unit/kernels/kquant_test.cc).
#include <cmath>

#include "common/quant.h"
#include "kernels/cpu/internal.h"

namespace tessera::kernels::cpu::internal {
namespace {

// The integer sums of one super-block (isc: the scaled dots with offsets applied).
struct ISums {
  int32_t isc = 0;
  int32_t imin = 0;
};

// Element e's value of each type (e = 128 h + 32 s + l for the 2-bit layouts).
int Q2Value(const BlockQ2_K& w, int e) {
  return (w.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}
int Q3Value(const BlockQ3_K& w, int e) {  // q' = low2 | hbit << 2
  const int h = e / 128, s = (e % 128) / 32, l = e % 32;
  return ((w.qs[32 * h + l] >> (2 * s)) & 3) | (((w.hmask[l] >> (4 * h + s)) & 1) << 2);
}
int Q5Value(const BlockQ5_K& w, int e) {
  const int t = e / 32, l = e % 32;
  return ((w.qs[32 * (t / 2) + l] >> (4 * (t % 2))) & 0xF) | (((w.qh[l] >> t) & 1) << 4);
}
int Q6Value(const BlockQ6_K& w, int e) {
  const int h = e / 128, g = (e % 128) / 32, l = e % 32;
  const int lo = (w.ql[64 * h + l + 32 * (g % 2)] >> (4 * (g / 2))) & 0xF;
  return lo | (((w.qh[32 * h + l] >> (2 * g)) & 3) << 4);
}
int Iq4XsValue(const BlockIQ4_XS& w, int e) {
  const int t = e / 32, i = e % 32;
  const uint8_t b = w.qs[16 * t + i % 16];
  return kIq4NlValues[i < 16 ? (b & 0xF) : (b >> 4)];
}

template <class Block, int (*Value)(const Block&, int)>
int32_t Dot(const Block& w, const int8_t* xb, int first, int count) {
  int32_t dot = 0;
  for (int e = first; e < first + count; ++e) dot += Value(w, e) * int32_t{xb[e]};
  return dot;
}

ISums SumsQ2K(const BlockQ2_K& w, const int8_t* xb, const int16_t* bs16, const int16_t*) {
  ISums r;
  for (int j = 0; j < 16; ++j) {
    r.isc += (w.scales[j] & 0xF) * Dot<BlockQ2_K, Q2Value>(w, xb, 16 * j, 16);
    r.imin += (w.scales[j] >> 4) * int32_t{bs16[j]};
  }
  return r;
}

ISums SumsQ3K(const BlockQ3_K& w, const int8_t* xb, const int16_t* bs16, const int16_t*) {
  int8_t sc[16];
  Q3KScales(w.scales, sc);
  ISums r;
  for (int j = 0; j < 16; ++j)
    r.isc += sc[j] * (Dot<BlockQ3_K, Q3Value>(w, xb, 16 * j, 16) - 4 * int32_t{bs16[j]});
  return r;
}

ISums SumsQ5K(const BlockQ5_K& w, const int8_t* xb, const int16_t*, const int16_t* bs32) {
  ISums r;
  for (int t = 0; t < 8; ++t) {
    uint8_t sc, m;
    Q4KScaleMin(w.scales, t, &sc, &m);
    r.isc += sc * Dot<BlockQ5_K, Q5Value>(w, xb, 32 * t, 32);
    r.imin += m * int32_t{bs32[t]};
  }
  return r;
}

ISums SumsQ6K(const BlockQ6_K& w, const int8_t* xb, const int16_t* bs16, const int16_t*) {
  ISums r;
  for (int j = 0; j < 16; ++j)
    r.isc += w.scales[j] * (Dot<BlockQ6_K, Q6Value>(w, xb, 16 * j, 16) - 32 * int32_t{bs16[j]});
  return r;
}

ISums SumsIq4Xs(const BlockIQ4_XS& w, const int8_t* xb, const int16_t*, const int16_t*) {
  ISums r;
  for (int t = 0; t < 8; ++t) r.isc += (IQ4XSScale(w, t) - 32) * Dot<BlockIQ4_XS, Iq4XsValue>(w, xb, 32 * t, 32);
  return r;
}

template <class Block, ISums (*Sums)(const Block&, const int8_t*, const int16_t*, const int16_t*),
          bool kMin>
float Row(const QuantActs& a, int64_t i, const void* w_row) {
  const auto* w = static_cast<const Block*>(w_row);
  const int64_t nb = a.k / 256;
  const int8_t* xq = a.q + i * a.k;
  const float* dx = a.d + i * nb;
  const int16_t* bs16 = a.sums16 + i * (a.k / 16);
  const int16_t* bs32 = a.sums + i * (a.k / 32);
  float s = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const ISums r = Sums(w[b], xq + 256 * b, bs16 + 16 * b, bs32 + 8 * b);
    s = std::fma(F16ToF32(w[b].d) * dx[b], static_cast<float>(r.isc), s);
    if constexpr (kMin) s = std::fma(-(F16ToF32(w[b].dmin) * dx[b]), static_cast<float>(r.imin), s);
  }
  return s;
}

}  // namespace

float KQuantRowScalar(const QuantActs& a, int64_t i, const void* w_row, DType w_type) {
  switch (w_type) {
    case DType::kQ2_K: return Row<BlockQ2_K, SumsQ2K, true>(a, i, w_row);
    case DType::kQ3_K: return Row<BlockQ3_K, SumsQ3K, false>(a, i, w_row);
    case DType::kQ5_K: return Row<BlockQ5_K, SumsQ5K, true>(a, i, w_row);
    case DType::kQ6_K: return Row<BlockQ6_K, SumsQ6K, false>(a, i, w_row);
    case DType::kIQ4_XS: return Row<BlockIQ4_XS, SumsIq4Xs, false>(a, i, w_row);
    default: return 0.0f;
  }
}

}  // namespace tessera::kernels::cpu::internal
