// Portable scalar kernels (no SIMD intrinsics): the fallback on CPUs without
// AVX2/FMA/F16C and under TESSERA_CPU_SCALAR=1. Each reduction runs in one fixed
// order per output element (self-consistent, so batch-invariant), but not the
// AVX2 order: scalar and AVX2 results agree to rounding only.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/quant.h"
#include "kernels/cpu/internal.h"

namespace tessera::kernels::cpu::internal {
namespace {

// Dot product with 8 interleaved partial sums combined by a fixed tree, then the
// k % 8 tail in order. The lanes are independent, so compilers may vectorize this
// without changing its value.
float Dot(const float* a, const float* b, int64_t k) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t k8 = k & ~int64_t{7};
  for (int64_t i = 0; i < k8; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (int64_t i = k8; i < k; ++i) s += a[i] * b[i];
  return s;
}

thread_local std::vector<float> t_row;
thread_local std::vector<float> t_scores;

float* Scratch(std::vector<float>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(n);
  return v.data();
}

}  // namespace

void ConvertScalar(const void* src, DType type, int64_t count, float* dst) {
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(count) * sizeof(float));
      return;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < count; ++i) dst[i] = Bf16ToF32(s[i]);
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < count; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
    default:
      if (IsQuantized(type)) DequantizeRow(src, type, count, dst);
      return;
  }
}

// Each weight row is converted once to f32 (exact) and dotted with every x row.
void LinearColsScalar(const float* x, int64_t m, int64_t k, const void* w, DType w_type,
                      int64_t n_begin, int64_t n_end, const float* bias, float* y,
                      int64_t ldy) {
  const int64_t row_bytes = DTypeRowBytes(w_type, k);
  float* wrow = w_type == DType::kF32 ? nullptr : Scratch(t_row, k);
  for (int64_t j = n_begin; j < n_end; ++j) {
    const void* src = static_cast<const uint8_t*>(w) + j * row_bytes;
    const float* wr = static_cast<const float*>(src);
    if (wrow != nullptr) {
      ConvertScalar(src, w_type, k, wrow);
      wr = wrow;
    }
    for (int64_t i = 0; i < m; ++i) {
      float s = Dot(x + i * k, wr, k);
      if (bias != nullptr) s += bias[j];
      y[i * ldy + j] = s;
    }
  }
}

namespace {
float RmsScale(const float* r, int64_t dim, float eps) {
  double ss = 0.0;  // fixed sequential order; double keeps it accurate for any dim
  for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(r[i]) * r[i];
  const float mean = static_cast<float>(ss / static_cast<double>(dim));
  return 1.0f / std::sqrt(mean + eps);
}
}  // namespace

void RmsNormRowsScalar(const float* x, const float* weight, int64_t rows, int64_t dim,
                       float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* o = out + r * dim;
    const float scale = RmsScale(xr, dim, eps);
    for (int64_t i = 0; i < dim; ++i) o[i] = xr[i] * scale * weight[i];
  }
}

void AddRmsNormRowsScalar(float* residual, const float* x, const float* weight, int64_t rows,
                          int64_t dim, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    float* res = residual + r * dim;
    const float* xr = x + r * dim;
    for (int64_t i = 0; i < dim; ++i) res[i] += xr[i];
    const float scale = RmsScale(res, dim, eps);
    float* o = out + r * dim;
    for (int64_t i = 0; i < dim; ++i) o[i] = res[i] * scale * weight[i];
  }
}

void SiluMulRowsScalar(const float* gate_up, int64_t rows, int64_t inter, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up + r * 2 * inter;
    const float* u = g + inter;
    float* o = out + r * inter;
    for (int64_t i = 0; i < inter; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

// The same equation as GeluTanh in simd_avx2.h: x / (1 + exp(-2u)).
void GeluTanhMulRowsScalar(const float* gate_up, int64_t rows, int64_t inter, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up + r * 2 * inter;
    const float* u = g + inter;
    float* o = out + r * inter;
    for (int64_t i = 0; i < inter; ++i) {
      const float x = g[i];
      const float v = 0.7978845608028654f * (x + 0.044715f * x * x * x);
      o[i] = x / (1.0f + std::exp(-2.0f * v)) * u[i];
    }
  }
}

void SoftCapScalar(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void RopeItemsScalar(float* x, int64_t heads, int64_t head_dim, int64_t x_stride,
                     int64_t rot_dim, const int32_t* positions, const float* cos_sin,
                     int64_t begin, int64_t end) {
  const int64_t half = rot_dim / 2;
  for (int64_t item = begin; item < end; ++item) {
    const int64_t t = item / heads, h = item % heads;
    float* xh = x + t * x_stride + h * head_dim;
    const float* c = cos_sin + static_cast<int64_t>(positions[t]) * rot_dim;
    const float* s = c + half;
    for (int64_t i = 0; i < half; ++i) {
      const float x1 = xh[i], x2 = xh[i + half];
      xh[i] = x1 * c[i] - x2 * s[i];
      xh[i + half] = x2 * c[i] + x1 * s[i];
    }
  }
}

void AttentionItemsScalar(const PagedAttentionArgs& a, int64_t begin, int64_t end) {
  const int64_t hd = a.head_dim, bs = a.block_size;
  const int64_t group = a.num_q_heads / a.num_kv_heads;
  const int64_t row = a.num_kv_heads * hd;  // floats per cache slot
  for (int64_t item = begin; item < end; ++item) {
    const int64_t t = item / a.num_q_heads, h = item % a.num_q_heads;
    float* out = a.out + item * hd;
    const int64_t p = a.positions[t];
    if (p < 0) {
      std::fill(out, out + hd, 0.0f);
      continue;
    }
    const int64_t lo = FirstKey(p, a.sliding_window), n = p - lo + 1;
    const int32_t* table = a.block_tables + a.token_to_seq[t] * a.max_blocks_per_seq;
    const int64_t off = (h / group) * hd;
    const float* q = a.q + t * a.q_stride + h * hd;
    auto slot = [&](int64_t pos) { return (table[pos / bs] * bs + pos % bs) * row + off; };
    float* sc = Scratch(t_scores, n);
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      sc[j] = Dot(q, a.k_cache + slot(lo + j), hd) * a.scale;
      if (a.softcap > 0.0f) sc[j] = a.softcap * std::tanh(sc[j] / a.softcap);
      mx = std::max(mx, sc[j]);
    }
    const float sink = a.sinks != nullptr ? a.sinks[h] : 0.0f;
    if (a.sinks != nullptr) mx = std::max(mx, sink);
    float sum = 0.0f;
    for (int64_t j = 0; j < n; ++j) {
      sc[j] = std::exp(sc[j] - mx);
      sum += sc[j];
    }
    if (a.sinks != nullptr) sum += std::exp(sink - mx);
    std::fill(out, out + hd, 0.0f);
    for (int64_t j = 0; j < n; ++j) {
      const float* v = a.v_cache + slot(lo + j);
      for (int64_t d = 0; d < hd; ++d) out[d] += sc[j] * v[d];
    }
    for (int64_t d = 0; d < hd; ++d) out[d] /= sum;
  }
}

}  // namespace tessera::kernels::cpu::internal
