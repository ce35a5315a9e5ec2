// Portable int8 kernels for block-quantized weights: activation quantization and
// Linear. This file DEFINES the arithmetic; quant_avx2.cc computes the very same
// sequence per output element, so scalar and AVX2 results are bitwise equal.
//
// Per output element y[i][j] (x row i quantized by QuantizeActs, weight row j):
//   Q8_0: s = 0; for block b: isum = sum_l w[l] * xq[l]                (exact int32)
//                             s = fma(d_w[b] * d_x[b], float(isum), s)
//   Q4_0: as Q8_0 with isum = sum_l nib[l] * xq[l] - 8 * sum_l xq[l]   (exact int32)
//   Q4_K: per 256-block b with sub-blocks t = 0..7 (scale sc_t, min m_t):
//           isc = sum_t sc_t * sum_l q[l] * xq[l];  imin = sum_t m_t * sum_l xq[l]
//           s = fma(d[b] * d_x[b], float(isc), s);  s = fma(-(dmin[b] * d_x[b]), float(imin), s)
//   then y = s + bias[j].
//   Q2_K, Q3_K, Q5_K, Q6_K, IQ4_XS: see kquant_scalar.cc; Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4:
//   quant32_scalar.cc.
// Integer sums are exact in any order; the float steps are one fixed chain.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/quant.h"
#include "kernels/cpu/internal.h"

namespace tessera::kernels::cpu::internal {

void QuantActSums(const int8_t* q, int64_t k, int16_t* sums, int16_t* sums16) {
  for (int64_t g = 0; g < k / 32; ++g) {
    int s = 0;
    for (int l = 0; l < 32; ++l) s += q[32 * g + l];
    sums[g] = static_cast<int16_t>(s);
  }
  if (sums16 == nullptr) return;
  for (int64_t g = 0; g < k / 16; ++g) {
    int s = 0;
    for (int l = 0; l < 16; ++l) s += q[16 * g + l];
    sums16[g] = static_cast<int16_t>(s);
  }
}

void QuantizeActsScalar(const float* x, int64_t rows, int64_t k, int64_t block, int8_t* q,
                        float* d, int16_t* sums, int16_t* sums16) {
  const int64_t nb = k / block;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * k;
    int8_t* qr = q + r * k;
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = xr + b * block;
      float amax = 0.0f;
      bool nan = false;
      for (int64_t l = 0; l < block; ++l) {
        const float a = std::fabs(xb[l]);
        nan |= std::isnan(a);
        amax = a > amax ? a : amax;
      }
      const float db = amax / 127.0f;
      const float id = db != 0.0f ? 1.0f / db : 0.0f;
      d[r * nb + b] = nan ? std::numeric_limits<float>::quiet_NaN() : db;
      for (int64_t l = 0; l < block; ++l) {
        float v = xb[l] * id;
        if (std::isnan(v)) v = 0.0f;
        v = std::min(std::max(v, -127.0f), 127.0f);
        qr[b * block + l] = static_cast<int8_t>(std::nearbyint(v));  // half-even
      }
    }
    QuantActSums(qr, k, sums + r * (k / 32), sums16 != nullptr ? sums16 + r * (k / 16) : nullptr);
  }
}

namespace {

float RowQ8_0(const QuantActs& a, int64_t i, const BlockQ8_0* w) {
  const int8_t* xq = a.q + i * a.k;
  const float* dx = a.d + i * (a.k / 32);
  float s = 0.0f;
  for (int64_t b = 0; b < a.k / 32; ++b) {
    int32_t isum = 0;
    for (int l = 0; l < 32; ++l) isum += int32_t{w[b].qs[l]} * xq[32 * b + l];
    s = std::fma(F16ToF32(w[b].d) * dx[b], static_cast<float>(isum), s);
  }
  return s;
}

float RowQ4_0(const QuantActs& a, int64_t i, const BlockQ4_0* w) {
  const int8_t* xq = a.q + i * a.k;
  const float* dx = a.d + i * (a.k / 32);
  const int16_t* xs = a.sums + i * (a.k / 32);
  float s = 0.0f;
  for (int64_t b = 0; b < a.k / 32; ++b) {
    int32_t isum = 0;
    for (int l = 0; l < 16; ++l) {
      isum += int32_t{w[b].qs[l] & 0xF} * xq[32 * b + l];
      isum += int32_t{w[b].qs[l] >> 4} * xq[32 * b + 16 + l];
    }
    isum -= 8 * int32_t{xs[b]};
    s = std::fma(F16ToF32(w[b].d) * dx[b], static_cast<float>(isum), s);
  }
  return s;
}

float RowQ4_K(const QuantActs& a, int64_t i, const BlockQ4_K* w) {
  const int8_t* xq = a.q + i * a.k;
  const float* dx = a.d + i * (a.k / 256);
  const int16_t* xs = a.sums + i * (a.k / 32);
  float s = 0.0f;
  for (int64_t b = 0; b < a.k / 256; ++b) {
    int32_t isc = 0, imin = 0;
    for (int t = 0; t < 8; ++t) {
      uint8_t sc, m;
      Q4KScaleMin(w[b].scales, t, &sc, &m);
      const uint8_t* qs = w[b].qs + 32 * (t / 2);
      const int shift = 4 * (t % 2);
      const int8_t* xb = xq + 256 * b + 32 * t;
      int32_t dot = 0;
      for (int l = 0; l < 32; ++l) dot += int32_t{(qs[l] >> shift) & 0xF} * xb[l];
      isc += int32_t{sc} * dot;
      imin += int32_t{m} * xs[8 * b + t];
    }
    s = std::fma(F16ToF32(w[b].d) * dx[b], static_cast<float>(isc), s);
    s = std::fma(-(F16ToF32(w[b].dmin) * dx[b]), static_cast<float>(imin), s);
  }
  return s;
}

}  // namespace

void LinearQuantColsScalar(const QuantActs& a, const void* w, DType w_type, int64_t n_begin,
                           int64_t n_end, const float* bias, float* y, int64_t ldy) {
  const int64_t row_bytes = DTypeRowBytes(w_type, a.k);
  for (int64_t j = n_begin; j < n_end; ++j) {
    const void* wr = static_cast<const uint8_t*>(w) + j * row_bytes;
    for (int64_t i = 0; i < a.m; ++i) {
      float s = 0.0f;
      switch (w_type) {
        case DType::kQ8_0: s = RowQ8_0(a, i, static_cast<const BlockQ8_0*>(wr)); break;
        case DType::kQ4_0: s = RowQ4_0(a, i, static_cast<const BlockQ4_0*>(wr)); break;
        case DType::kQ4_K: s = RowQ4_K(a, i, static_cast<const BlockQ4_K*>(wr)); break;
        case DType::kQ2_K:
        case DType::kQ3_K:
        case DType::kQ5_K:
        case DType::kQ6_K:
        case DType::kIQ4_XS: s = KQuantRowScalar(a, i, wr, w_type); break;
        case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: case DType::kIQ4_NL:
        case DType::kMXFP4: s = LinearQuant32RowScalar(a, i, wr, w_type); break;
        default: break;
      }
      if (bias != nullptr) s = s + bias[j];
      y[i * ldy + j] = s;
    }
  }
}

}  // namespace tessera::kernels::cpu::internal
