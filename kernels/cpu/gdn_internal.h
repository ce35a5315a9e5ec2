// The column loops of the Gated DeltaNet core (gdn_core.cc), scalar and AVX2.
//
// Each output column is computed by the same chain of operations whatever the width or the
// column's place in a vector: the AVX2 versions use FMA in vector lanes and the scalar
// Fma() of simd_avx2.h in their tails, so a column's bits do not depend on the tiling
// (thread count). Scalar and AVX2 agree to rounding only (FMA vs multiply then add).
#pragma once

#include <cstdint>

namespace tessera::kernels::cpu::gdn {

// sk[c] = Σ_{j ascending} S[j * ld + c] k[j], sq[c] likewise with q, for c < width.
void StateDotsScalar(const float* S, int64_t ld, int64_t dk, const float* k, const float* q, int64_t width,
                     float* sk, float* sq);
void StateDotsAvx2(const float* S, int64_t ld, int64_t dk, const float* k, const float* q, int64_t width,
                   float* sk, float* sq);

// y[c] = post * ((base ? base[c] + s t[c] : s t[c]) + Σ_{m ascending < nm} coef[m] xs[m][c]),
// for c < width; y may alias t or base (elementwise).
void LinCombScalar(float* y, const float* base, float s, const float* t, const float* coef,
                   const float* const* xs, int64_t nm, float post, int64_t width);
void LinCombAvx2(float* y, const float* base, float s, const float* t, const float* coef,
                 const float* const* xs, int64_t nm, float post, int64_t width);

}  // namespace tessera::kernels::cpu::gdn
