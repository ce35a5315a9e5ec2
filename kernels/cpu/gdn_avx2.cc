// AVX2/FMA column loops of the Gated DeltaNet core (gdn_internal.h). Compiled with
// -mavx2 -mfma; entered only when UseAvx2().
#include <immintrin.h>

#include "kernels/cpu/gdn_internal.h"
#include "kernels/cpu/simd_avx2.h"

namespace tessera::kernels::cpu::gdn {

using avx2::Fma;

void StateDotsAvx2(const float* S, int64_t ld, int64_t dk, const float* k, const float* q, int64_t width,
                   float* sk, float* sq) {
  int64_t c = 0;
  for (; c + 16 <= width; c += 16) {  // two vectors per row of S: four independent chains
    __m256 k0 = _mm256_setzero_ps(), k1 = k0, q0 = k0, q1 = k0;
    for (int64_t j = 0; j < dk; ++j) {
      const float* s = S + j * ld + c;
      const __m256 kj = _mm256_set1_ps(k[j]), qj = _mm256_set1_ps(q[j]);
      const __m256 s0 = _mm256_loadu_ps(s), s1 = _mm256_loadu_ps(s + 8);
      k0 = _mm256_fmadd_ps(s0, kj, k0);
      k1 = _mm256_fmadd_ps(s1, kj, k1);
      q0 = _mm256_fmadd_ps(s0, qj, q0);
      q1 = _mm256_fmadd_ps(s1, qj, q1);
    }
    _mm256_storeu_ps(sk + c, k0);
    _mm256_storeu_ps(sk + c + 8, k1);
    _mm256_storeu_ps(sq + c, q0);
    _mm256_storeu_ps(sq + c + 8, q1);
  }
  for (; c + 8 <= width; c += 8) {
    __m256 k0 = _mm256_setzero_ps(), q0 = k0;
    for (int64_t j = 0; j < dk; ++j) {
      const __m256 s0 = _mm256_loadu_ps(S + j * ld + c);
      k0 = _mm256_fmadd_ps(s0, _mm256_set1_ps(k[j]), k0);
      q0 = _mm256_fmadd_ps(s0, _mm256_set1_ps(q[j]), q0);
    }
    _mm256_storeu_ps(sk + c, k0);
    _mm256_storeu_ps(sq + c, q0);
  }
  for (; c < width; ++c) {
    float a = 0.0f, b = 0.0f;
    for (int64_t j = 0; j < dk; ++j) {
      a = Fma(S[j * ld + c], k[j], a);
      b = Fma(S[j * ld + c], q[j], b);
    }
    sk[c] = a;
    sq[c] = b;
  }
}

void LinCombAvx2(float* y, const float* base, float s, const float* t, const float* coef,
                 const float* const* xs, int64_t nm, float post, int64_t width) {
  const __m256 sv = _mm256_set1_ps(s), pv = _mm256_set1_ps(post);
  int64_t c = 0;
  for (; c + 8 <= width; c += 8) {
    const __m256 tv = _mm256_loadu_ps(t + c);
    __m256 acc = base ? _mm256_fmadd_ps(sv, tv, _mm256_loadu_ps(base + c)) : _mm256_mul_ps(sv, tv);
    for (int64_t m = 0; m < nm; ++m) acc = _mm256_fmadd_ps(_mm256_set1_ps(coef[m]), _mm256_loadu_ps(xs[m] + c), acc);
    _mm256_storeu_ps(y + c, _mm256_mul_ps(pv, acc));
  }
  for (; c < width; ++c) {
    float acc = base ? Fma(s, t[c], base[c]) : s * t[c];
    for (int64_t m = 0; m < nm; ++m) acc = Fma(coef[m], xs[m][c], acc);
    y[c] = post * acc;
  }
}

}  // namespace tessera::kernels::cpu::gdn
