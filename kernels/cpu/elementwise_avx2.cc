// AVX2 row-wise and elementwise kernels: RmsNorm, AddRmsNorm, SiluMul, Rope,
// ConvertToF32. Only RmsNorm reduces; its order depends on dim alone.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/simd_avx2.h"

namespace tessera::kernels::cpu::internal {
namespace {

// Sum of squares: four 8-lane accumulators over 32-float steps, then one over the
// remaining 8-float steps into acc0, combined (a0+a1)+(a2+a3), Hsum, then the
// dim % 8 tail by scalar FMA. Fixed by dim, so batch-invariant.
float SumSquares(const float* r, int64_t dim) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= dim; i += 32) {
    const __m256 v0 = _mm256_loadu_ps(r + i), v1 = _mm256_loadu_ps(r + i + 8);
    const __m256 v2 = _mm256_loadu_ps(r + i + 16), v3 = _mm256_loadu_ps(r + i + 24);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
    a2 = _mm256_fmadd_ps(v2, v2, a2);
    a3 = _mm256_fmadd_ps(v3, v3, a3);
  }
  for (; i + 8 <= dim; i += 8) {
    const __m256 v = _mm256_loadu_ps(r + i);
    a0 = _mm256_fmadd_ps(v, v, a0);
  }
  float s = avx2::Hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  for (; i < dim; ++i) s = avx2::Fma(r[i], r[i], s);
  return s;
}

float RmsScale(const float* r, int64_t dim, float eps) {
  const float mean = SumSquares(r, dim) / static_cast<float>(dim);
  return 1.0f / std::sqrt(mean + eps);
}

// o = (r * scale) * w, elementwise.
void ScaleMul(const float* r, float scale, const float* w, int64_t dim, float* o) {
  const __m256 sv = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= dim; i += 8) {
    _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(r + i), sv),
                                          _mm256_loadu_ps(w + i)));
  }
  for (; i < dim; ++i) {
    o[i] = r[i] * scale * w[i];
  }
}

}  // namespace

void RmsNormRowsAvx2(const float* x, const float* weight, int64_t rows, int64_t dim,
                     float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    ScaleMul(xr, RmsScale(xr, dim, eps), weight, dim, out + r * dim);
  }
}

void AddRmsNormRowsAvx2(float* residual, const float* x, const float* weight, int64_t rows,
                        int64_t dim, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    float* res = residual + r * dim;
    const float* xr = x + r * dim;
    int64_t i = 0;
    for (; i + 8 <= dim; i += 8) {
      _mm256_storeu_ps(res + i, _mm256_add_ps(_mm256_loadu_ps(res + i), _mm256_loadu_ps(xr + i)));
    }
    for (; i < dim; ++i) res[i] += xr[i];
    ScaleMul(res, RmsScale(res, dim, eps), weight, dim, out + r * dim);
  }
}

void SiluMulRowsAvx2(const float* gate_up, int64_t rows, int64_t inter, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up + r * 2 * inter;
    const float* u = g + inter;
    float* o = out + r * inter;
    int64_t i = 0;
    for (; i + 8 <= inter; i += 8) {
      const __m256 gv = _mm256_loadu_ps(g + i);
      const __m256 e = avx2::Exp(_mm256_xor_ps(gv, sign));
      const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(one, e));
      _mm256_storeu_ps(o + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
    }
    if (i < inter) {  // tail through the same vector exp, via a padded copy
      alignas(32) float gt[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      alignas(32) float ut[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      std::memcpy(gt, g + i, (inter - i) * sizeof(float));
      std::memcpy(ut, u + i, (inter - i) * sizeof(float));
      const __m256 gv = _mm256_load_ps(gt);
      const __m256 e = avx2::Exp(_mm256_xor_ps(gv, sign));
      const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(one, e));
      _mm256_store_ps(gt, _mm256_mul_ps(silu, _mm256_load_ps(ut)));
      std::memcpy(o + i, gt, (inter - i) * sizeof(float));
    }
  }
}

// Applies f to every 8 lanes of n floats at x (in place); the n % 8 tail goes through
// the same vector code via a zero-padded copy, so every element gets the same function.
template <typename F>
void MapInPlace(float* x, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, f(_mm256_loadu_ps(x + i)));
  if (i < n) {
    alignas(32) float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(t, x + i, (n - i) * sizeof(float));
    _mm256_store_ps(t, f(_mm256_load_ps(t)));
    std::memcpy(x + i, t, (n - i) * sizeof(float));
  }
}

void GeluTanhMulRowsAvx2(const float* gate_up, int64_t rows, int64_t inter, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up + r * 2 * inter;
    const float* u = g + inter;
    float* o = out + r * inter;
    std::memcpy(o, g, inter * sizeof(float));
    MapInPlace(o, inter, [](__m256 v) { return avx2::GeluTanh(v); });
    int64_t i = 0;
    for (; i + 8 <= inter; i += 8) {
      _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(o + i), _mm256_loadu_ps(u + i)));
    }
    for (; i < inter; ++i) o[i] = o[i] * u[i];
  }
}

void SoftCapAvx2(float* x, int64_t n, float cap) {
  const __m256 c = _mm256_set1_ps(cap);
  MapInPlace(x, n, [c](__m256 v) { return _mm256_mul_ps(c, avx2::Tanh(_mm256_div_ps(v, c))); });
}

void ConvertAvx2(const void* src, DType type, int64_t count, float* dst) {
  if (type == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
    return;
  }
  const auto* s = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  if (type == DType::kBF16) {
    for (; i + 8 <= count; i += 8) _mm256_storeu_ps(dst + i, avx2::Load8(s + i, avx2::Bf16Tag{}));
    for (; i < count; ++i) dst[i] = Bf16ToF32(s[i]);
  } else if (type == DType::kF16) {
    for (; i + 8 <= count; i += 8) _mm256_storeu_ps(dst + i, avx2::Load8(s + i, avx2::F16Tag{}));
    for (; i < count; ++i) dst[i] = _cvtsh_ss(s[i]);
  }
}

// Elementwise, no reduction: each output depends on its own inputs only.
void RopeItemsAvx2(float* x, int64_t heads, int64_t head_dim, int64_t x_stride,
                   int64_t rot_dim, const int32_t* positions, const float* cos_sin,
                   int64_t begin, int64_t end) {
  const int64_t half = rot_dim / 2;
  for (int64_t item = begin; item < end; ++item) {
    const int64_t t = item / heads, h = item % heads;
    float* xh = x + t * x_stride + h * head_dim;
    const float* c = cos_sin + static_cast<int64_t>(positions[t]) * rot_dim;
    const float* s = c + half;
    int64_t i = 0;
    for (; i + 8 <= half; i += 8) {
      const __m256 x1 = _mm256_loadu_ps(xh + i), x2 = _mm256_loadu_ps(xh + half + i);
      const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
      _mm256_storeu_ps(xh + i, _mm256_sub_ps(_mm256_mul_ps(x1, cv), _mm256_mul_ps(x2, sv)));
      _mm256_storeu_ps(xh + half + i,
                       _mm256_add_ps(_mm256_mul_ps(x2, cv), _mm256_mul_ps(x1, sv)));
    }
    for (; i < half; ++i) {
      const float x1 = xh[i], x2 = xh[i + half];
      xh[i] = x1 * c[i] - x2 * s[i];
      xh[i + half] = x2 * c[i] + x1 * s[i];
    }
  }
}

}  // namespace tessera::kernels::cpu::internal
