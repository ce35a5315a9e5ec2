// Portable int8 Linear for the 32-element weight types added after Q8_0/Q4_0: Q4_1,
// Q5_0, Q5_1, IQ4_NL and MXFP4 (common/quant.h has their layouts). This file DEFINES the
// arithmetic; quant32_avx2.cc and quant32_avx512.cc compute the very same sequence per
// output element, so the three paths are bitwise equal.
//
// Activations come from QuantizeActs with blocks of 32 (d_x per block, xq int8 in
// [-127, 127], xsum = sum of the block's xq). Per output element y[i][j] (x row i, weight
// row j), s = 0, then for each weight block b in k order:
//   isum = sum_l v[l] * xq[l]                  exact int32 (|isum| < 2^19, see below)
//   s = fma(d_w * d_x, float(isum), s)         (d_w * d_x one f32 product)
//   Q4_1/Q5_1 only: s = fma(m_w * d_x, float(xsum), s)
// and y = s + bias[j], where per type
//   Q4_1: v = nibble (0..15),            d_w, m_w its f16 d and m
//   Q5_0: v = (nibble | qh bit << 4) - 16 (-16..15), d_w its f16 d
//   Q5_1: v = nibble | qh bit << 4 (0..31), d_w, m_w its f16 d and m
//   IQ4_NL: v = kIq4NlValues[nibble] (-127..113), d_w its f16 d
//   MXFP4: v = kMxfp4Values[nibble] (doubled E2M1, -12..12), d_w = E8M0ToF32Half(e), a power
//          of two, so d_w * d_x is exact (barring under/overflow)
// The SIMD kernels reach the same isum through exact identities (dot(v + c, xq) - c * xsum
// with an unsigned v + c, or |v| times xq with v's sign), never a different float step.
//
// Exactness bound. The dequantized weight DequantizeRow gives is fl(d_w * v + m_w) (Q4_1/
// Q5_1) or d_w * v exactly (the others), and isum, xsum are exact integers below 2^24, so
// float(isum) is exact. With u = 2^-24 and F the number of fmas (one per block, two for
// Q4_1/Q5_1), y differs from the float64 sum over k of dequant(w) * d_x * xq (+ bias) by at
// most about (F + 3) u * M + u |bias|, where M = sum_k (|d_w v| + |m_w|) |d_x xq|
// (each product d_w * d_x and each fma rounds once; the min term's magnitude counts in M
// because it is added separately from the scaled dot). Subnormal d_w * d_x lose more.
// NaN in x (d_x = NaN) makes its row NaN, as for the other types.
#include <cmath>
#include <cstdint>

#include "common/quant.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/quant32.h"

namespace tessera::kernels::cpu::internal {
namespace {

// Nibble l (0..31) of a 16-byte qs in Q4_0's order, and bit l of a little-endian qh.
int Nib(const uint8_t* qs, int l) { return l < 16 ? qs[l] & 0xF : qs[l - 16] >> 4; }
int Hbit(const uint8_t* qh, int l) { return (qh[l / 8] >> (l % 8)) & 1; }

// Per type T: the block struct, v (Value), d_w (Scale) and whether a min m_w follows.
template <DType T>
struct Kind;
template <>
struct Kind<DType::kQ4_1> {
  using Block = BlockQ4_1;
  static constexpr bool kMin = true;
  static int Value(const Block& b, int l) { return Nib(b.qs, l); }
  static float Scale(const Block& b) { return F16ToF32(b.d); }
  static float Min(const Block& b) { return F16ToF32(b.m); }
};
template <>
struct Kind<DType::kQ5_0> {
  using Block = BlockQ5_0;
  static constexpr bool kMin = false;
  static int Value(const Block& b, int l) { return (Nib(b.qs, l) | Hbit(b.qh, l) << 4) - 16; }
  static float Scale(const Block& b) { return F16ToF32(b.d); }
};
template <>
struct Kind<DType::kQ5_1> {
  using Block = BlockQ5_1;
  static constexpr bool kMin = true;
  static int Value(const Block& b, int l) { return Nib(b.qs, l) | Hbit(b.qh, l) << 4; }
  static float Scale(const Block& b) { return F16ToF32(b.d); }
  static float Min(const Block& b) { return F16ToF32(b.m); }
};
template <>
struct Kind<DType::kIQ4_NL> {
  using Block = BlockIQ4_NL;
  static constexpr bool kMin = false;
  static int Value(const Block& b, int l) { return kIq4NlValues[Nib(b.qs, l)]; }
  static float Scale(const Block& b) { return F16ToF32(b.d); }
};
template <>
struct Kind<DType::kMXFP4> {
  using Block = BlockMXFP4;
  static constexpr bool kMin = false;
  static int Value(const Block& b, int l) { return kMxfp4Values[Nib(b.qs, l)]; }
  static float Scale(const Block& b) { return E8M0ToF32Half(b.e); }
};

template <class T>
float Row(const QuantActs& a, int64_t i, const void* wr) {
  const auto* w = static_cast<const typename T::Block*>(wr);
  const int64_t nb = a.k / 32;
  const int8_t* xq = a.q + i * a.k;
  const float* dx = a.d + i * nb;
  const int16_t* xs = a.sums + i * nb;
  float s = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    int32_t isum = 0;
    for (int l = 0; l < 32; ++l) isum += T::Value(w[b], l) * int32_t{xq[32 * b + l]};
    s = std::fma(T::Scale(w[b]) * dx[b], static_cast<float>(isum), s);
    if constexpr (T::kMin) s = std::fma(T::Min(w[b]) * dx[b], static_cast<float>(xs[b]), s);
  }
  return s;
}

}  // namespace

float LinearQuant32RowScalar(const QuantActs& a, int64_t i, const void* w_row, DType w_type) {
  float s = 0.0f;
  Visit32(w_type, [&](auto t) { s = Row<Kind<decltype(t)::value>>(a, i, w_row); });
  return s;
}

}  // namespace tessera::kernels::cpu::internal
