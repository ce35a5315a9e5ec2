// AVX2/FMA/F16C helpers shared by the *_avx2.cc kernels. Include ONLY from files
// compiled with -mavx2 -mfma -mf16c (the *_avx2.cc ones): everything here is inline
// and uses those instructions unconditionally.
//
// Reduction order contract (docs/architecture.md, "Batch invariance"): every horizontal sum of an
// 8-lane accumulator a uses the tree ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7)), whether it
// is reduced alone (Hsum), four at a time (Hsum4) or eight at a time (Hsum8). Float
// addition is commutative, so the three give bitwise equal results per accumulator.
// GCC compiles C++20 with -ffp-contract=fast, which may fuse a multiply feeding an add
// into an FMA, including _mm256_mul_ps/_mm256_add_ps pairs (they are plain vector
// operators in GCC's headers). Reductions therefore use explicit FMA intrinsics (or
// Fma() for scalars) and never a product that flows straight into a sum.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace tessera::kernels::cpu::avx2 {

inline float Fma(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// ((a0+a1)+(a2+a3)) + ((a4+a5)+(a6+a7)).
inline float Hsum(__m256 a) {
  const __m128 t = _mm_hadd_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  // t = [a0+a1, a2+a3, a4+a5, a6+a7]
  const __m128 u = _mm_hadd_ps(t, t);  // [(a0+a1)+(a2+a3), (a4+a5)+(a6+a7), ...]
  return _mm_cvtss_f32(_mm_add_ss(u, _mm_movehdup_ps(u)));
}

// Lane i of the result = Hsum(a_i), same tree.
inline __m128 Hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  // h = [A0lo, A1lo, A2lo, A3lo | A0hi, A1hi, A2hi, A3hi]
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// Lane i of the result = Hsum(a[i]), same tree.
inline __m256 Hsum8(const __m256* a) {
  const __m256 lo = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 hi = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31));
}

inline float HmaxPs(__m256 a) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// 8 weights -> f32. bf16 is the top half of an f32 (exact); f16 via F16C (exact).
struct Bf16Tag {};
struct F16Tag {};
inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 Load8(const uint16_t* p, Bf16Tag) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline __m256 Load8(const uint16_t* p, F16Tag) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// exp(x) for f32 lanes. Cody-Waite reduction x = n*ln2 + r, |r| <= ln2/2, Cephes
// degree-5 minimax polynomial (max relative error ~1.5 ulp), scaled by 2^n in two
// exact steps. Results below FLT_MIN flush to 0; x > 88.72 gives +inf; NaN stays NaN.
// Cost: ~20 vector ops per 8 lanes.
inline __m256 Exp(__m256 x) {
  const __m256 kHi = _mm256_set1_ps(88.72283172607421875f);
  const __m256 kLo = _mm256_set1_ps(-87.3365478515625f);
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, kLo), kHi);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
  // n in [-126, 128]: multiply by 2^(n/2) twice-ish so neither factor overflows.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, kLo, _CMP_LT_OQ));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, kHi, _CMP_GT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// tanh(x) for f32 lanes, ~2 ulp: |x| < 0.625 by the odd minimax polynomial
// x + x^3 P(x^2) (Cephes tanhf), else 1 - 2 / (exp(2|x|) + 1) with x's sign (no
// cancellation there, since tanh(0.625) > 0.55). |x| large gives +-1; NaN stays NaN.
// Cost: one Exp plus ~12 vector ops per 8 lanes.
inline __m256 Tanh(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 ax = _mm256_andnot_ps(sign, x);
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
  const __m256 e = Exp(_mm256_add_ps(ax, ax));
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
  big = _mm256_or_ps(big, _mm256_and_ps(x, sign));  // big >= 0 here: copy x's sign
  const __m256 use_small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ);
  const __m256 y = _mm256_blendv_ps(big, small, use_small);
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// gelu_tanh(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as
// the equal x / (1 + exp(-2u)) (1 + tanh(u) = 2 / (1 + exp(-2u))): no cancellation
// for negative x. Large negative x gives -0; NaN stays NaN.
inline __m256 GeluTanh(__m256 x) {
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f),
                                 _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
  const __m256 e = Exp(_mm256_mul_ps(u, _mm256_set1_ps(-2.0f)));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

}  // namespace tessera::kernels::cpu::avx2
