#include "common/quant.h"

#include <cstring>

#include "common/quant_fit.h"

namespace tessera {
namespace {

// The types added after Q8_0/Q4_0/Q4_K. Each value is computed with the very
// operations (and order) of gguf-py's NumPy dequantization, in f32, so results are
// bitwise equal to it (tests/reference/). No FMA contraction: this file is compiled
// without -mfma.
void DequantizeRowMore(const void* src, DType type, int64_t n, float* dst) {
  const auto nib = [](const uint8_t* qs, int i) -> int {  // Q4_0's nibble order in 32
    return i < 16 ? (qs[i] & 0xF) : (qs[i - 16] >> 4);
  };
  const auto qh_bit = [](const uint8_t* qh, int i) -> int { return (qh[i / 8] >> (i % 8)) & 1; };
  switch (type) {
    case DType::kQ4_1: {
      const auto* b = static_cast<const BlockQ4_1*>(src);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float d = F16ToF32(b[k].d), m = F16ToF32(b[k].m);
        for (int i = 0; i < 32; ++i) dst[32 * k + i] = d * static_cast<float>(nib(b[k].qs, i)) + m;
      }
      break;
    }
    case DType::kQ5_0: {
      const auto* b = static_cast<const BlockQ5_0*>(src);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float d = F16ToF32(b[k].d);
        for (int i = 0; i < 32; ++i) {
          const int q = nib(b[k].qs, i) | (qh_bit(b[k].qh, i) << 4);
          dst[32 * k + i] = d * static_cast<float>(q - 16);
        }
      }
      break;
    }
    case DType::kQ5_1: {
      const auto* b = static_cast<const BlockQ5_1*>(src);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float d = F16ToF32(b[k].d), m = F16ToF32(b[k].m);
        for (int i = 0; i < 32; ++i) {
          const int q = nib(b[k].qs, i) | (qh_bit(b[k].qh, i) << 4);
          dst[32 * k + i] = d * static_cast<float>(q) + m;
        }
      }
      break;
    }
    case DType::kQ2_K: {
      const auto* b = static_cast<const BlockQ2_K*>(src);
      for (int64_t k = 0; k < n / 256; ++k) {
        const float d = F16ToF32(b[k].d), dmin = F16ToF32(b[k].dmin);
        for (int e = 0; e < 256; ++e) {
          const int h = e / 128, s = (e % 128) / 32, l = e % 32;
          const uint8_t sc = b[k].scales[e / 16];
          const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
          const int q = (b[k].qs[32 * h + l] >> (2 * s)) & 3;
          dst[256 * k + e] = dl * static_cast<float>(q) - ml;
        }
      }
      break;
    }
    case DType::kQ3_K: {
      const auto* b = static_cast<const BlockQ3_K*>(src);
      for (int64_t k = 0; k < n / 256; ++k) {
        const float d = F16ToF32(b[k].d);
        int8_t sc[16];
        Q3KScales(b[k].scales, sc);
        for (int e = 0; e < 256; ++e) {
          const int h = e / 128, s = (e % 128) / 32, l = e % 32;
          const int q = (b[k].qs[32 * h + l] >> (2 * s)) & 3;
          const int hi = (b[k].hmask[l] >> (4 * h + s)) & 1;
          const float dl = d * static_cast<float>(sc[e / 16]);
          dst[256 * k + e] = dl * static_cast<float>(q - (hi ? 0 : 4));
        }
      }
      break;
    }
    case DType::kQ5_K: {
      const auto* b = static_cast<const BlockQ5_K*>(src);
      for (int64_t k = 0; k < n / 256; ++k) {
        const float d = F16ToF32(b[k].d), dmin = F16ToF32(b[k].dmin);
        for (int t = 0; t < 8; ++t) {
          uint8_t sc, m;
          Q4KScaleMin(b[k].scales, t, &sc, &m);
          const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
          const int c = t / 2, shift = 4 * (t % 2);
          for (int l = 0; l < 32; ++l) {
            const int q = ((b[k].qs[32 * c + l] >> shift) & 0xF) | (((b[k].qh[l] >> t) & 1) << 4);
            dst[256 * k + 32 * t + l] = dl * static_cast<float>(q) - ml;
          }
        }
      }
      break;
    }
    case DType::kQ6_K: {
      const auto* b = static_cast<const BlockQ6_K*>(src);
      for (int64_t k = 0; k < n / 256; ++k) {
        const float d = F16ToF32(b[k].d);
        for (int e = 0; e < 256; ++e) {
          const int h = e / 128, g = (e % 128) / 32, l = e % 32;
          const uint8_t* ql = b[k].ql + 64 * h;
          const uint8_t* qh = b[k].qh + 32 * h;
          const int lo = (g % 2 == 0 ? ql[l] : ql[l + 32]) >> (g >= 2 ? 4 : 0) & 0xF;
          const int q = lo | (((qh[l] >> (2 * g)) & 3) << 4);
          const float dl = d * static_cast<float>(b[k].scales[e / 16]);
          dst[256 * k + e] = dl * static_cast<float>(q - 32);
        }
      }
      break;
    }
    case DType::kIQ4_NL: {
      const auto* b = static_cast<const BlockIQ4_NL*>(src);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float d = F16ToF32(b[k].d);
        for (int i = 0; i < 32; ++i) dst[32 * k + i] = d * static_cast<float>(kIq4NlValues[nib(b[k].qs, i)]);
      }
      break;
    }
    case DType::kIQ4_XS: {
      const auto* b = static_cast<const BlockIQ4_XS*>(src);
      for (int64_t k = 0; k < n / 256; ++k) {
        const float d = F16ToF32(b[k].d);
        for (int j = 0; j < 8; ++j) {
          const float dl = d * static_cast<float>(IQ4XSScale(b[k], j) - 32);
          for (int i = 0; i < 32; ++i) {
            dst[256 * k + 32 * j + i] = dl * static_cast<float>(kIq4NlValues[nib(b[k].qs + 16 * j, i)]);
          }
        }
      }
      break;
    }
    case DType::kMXFP4: {
      const auto* b = static_cast<const BlockMXFP4*>(src);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float d = E8M0ToF32Half(b[k].e);
        for (int i = 0; i < 32; ++i) dst[32 * k + i] = d * static_cast<float>(kMxfp4Values[nib(b[k].qs, i)]);
      }
      break;
    }
    default: break;
  }
}

}  // namespace

void QuantizeRow(const float* src, int64_t n, DType type, void* dst) {
  internal::QuantizeRowFit(src, n, type, dst);
}

void DequantizeRow(const void* src, DType type, int64_t n, float* dst) {
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, n * 4); break;
    case DType::kF16:
    case DType::kBF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = type == DType::kF16 ? F16ToF32(h[i]) : Bf16ToF32(h[i]);
      break;
    }
    case DType::kQ8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float d = F16ToF32(b[k].d);
        for (int i = 0; i < 32; ++i) dst[32 * k + i] = d * static_cast<float>(b[k].qs[i]);
      }
      break;
    }
    case DType::kQ4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t k = 0; k < n / 32; ++k) {
        const float d = F16ToF32(b[k].d);
        for (int i = 0; i < 16; ++i) {
          dst[32 * k + i] = d * static_cast<float>((b[k].qs[i] & 0xF) - 8);
          dst[32 * k + 16 + i] = d * static_cast<float>((b[k].qs[i] >> 4) - 8);
        }
      }
      break;
    }
    case DType::kQ4_K: {
      const auto* b = static_cast<const BlockQ4_K*>(src);
      for (int64_t k = 0; k < n / 256; ++k) {
        const float d = F16ToF32(b[k].d), dmin = F16ToF32(b[k].dmin);
        float* y = dst + 256 * k;
        for (int c = 0; c < 4; ++c) {
          uint8_t sc0, m0, sc1, m1;
          Q4KScaleMin(b[k].scales, 2 * c, &sc0, &m0);
          Q4KScaleMin(b[k].scales, 2 * c + 1, &sc1, &m1);
          const float d0 = d * sc0, o0 = dmin * m0, d1 = d * sc1, o1 = dmin * m1;
          const uint8_t* q = b[k].qs + 32 * c;
          for (int l = 0; l < 32; ++l) {
            y[64 * c + l] = d0 * static_cast<float>(q[l] & 0xF) - o0;
            y[64 * c + 32 + l] = d1 * static_cast<float>(q[l] >> 4) - o1;
          }
        }
      }
      break;
    }
    default: DequantizeRowMore(src, type, n, dst); break;
  }
}

}  // namespace tessera
