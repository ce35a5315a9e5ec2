#include "common/quant_fit.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/quant.h"

namespace tessera::internal {
namespace {

// The first element of largest magnitude, with its sign (NumPy's argmax of |x|).
float SignedAmax(const float* x, int n) {
  float amax = std::fabs(x[0]), max = x[0];
  for (int i = 1; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// Index of the first table value v[k] * d nearest to x (NumPy's argmin).
template <size_t N>
int Nearest(float x, float d, const int8_t (&v)[N]) {
  int best = 0;
  float best_err = std::fabs(d * static_cast<float>(v[0]) - x);
  for (size_t k = 1; k < N; ++k) {
    const float err = std::fabs(d * static_cast<float>(v[k]) - x);
    if (err < best_err) {
      best_err = err;
      best = static_cast<int>(k);
    }
  }
  return best;
}

uint8_t PackNibbles(int lo, int hi) { return static_cast<uint8_t>((lo & 0xF) | (hi << 4)); }

// ---- gguf-py's quantizers (gguf/quants.py), the same f32 operations in the same order.

// Q8_0: d = amax / 127, q = x / d rounded half away from zero (llama.cpp's reference too).
void QuantizeQ8_0(const float* x, int64_t nb, BlockQ8_0* y) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = F32ToF16(d);
    for (int i = 0; i < 32; ++i) y[b].qs[i] = static_cast<int8_t>(std::lround(x[i] * id));
  }
}

// Q4_0: d = max / -8 (max: the signed value of largest magnitude), q = trunc(x / d + 8.5).
void QuantizeQ4_0(const float* x, int64_t nb, BlockQ4_0* y) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    const float d = SignedAmax(x, 32) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = F32ToF16(d);
    for (int i = 0; i < 16; ++i) {
      const int q0 = std::clamp(static_cast<int>(std::trunc(x[i] * id + 8.5f)), 0, 15);
      const int q1 = std::clamp(static_cast<int>(std::trunc(x[i + 16] * id + 8.5f)), 0, 15);
      y[b].qs[i] = PackNibbles(q0, q1);
    }
  }
}

// Q4_1 and Q5_1: d = (max - min) / qmax, q = trunc((x - min) / d + 0.5) clipped.
void FitAffine(const float* x, int qmax, float* d_out, float* min_out, uint8_t* q) {
  float mx = x[0], mn = x[0];
  for (int i = 1; i < 32; ++i) {
    mx = std::max(mx, x[i]);
    mn = std::min(mn, x[i]);
  }
  const float d = (mx - mn) / static_cast<float>(qmax);
  const float id = d == 0.0f ? 0.0f : 1.0f / d;
  for (int i = 0; i < 32; ++i) {
    const float v = std::trunc((x[i] - mn) * id + 0.5f);
    q[i] = static_cast<uint8_t>(std::clamp(static_cast<int>(v), 0, qmax));
  }
  *d_out = d;
  *min_out = mn;
}

// Q4_1 and Q5_1: per 32 values the affine fit (scale and min as f16), then `pack`
// stores the 4- or 5-bit values q[0..32) into the block.
template <class Block, class Pack>
void QuantizeAffine(const float* x, int64_t nb, int qmax, Block* y, Pack pack) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    float d, mn;
    uint8_t q[32];
    FitAffine(x, qmax, &d, &mn, q);
    y[b].d = F32ToF16(d);
    y[b].m = F32ToF16(mn);
    pack(q, &y[b]);
  }
}

void QuantizeQ4_1(const float* x, int64_t nb, BlockQ4_1* y) {
  QuantizeAffine(x, nb, 15, y, [](const uint8_t* q, BlockQ4_1* blk) {
    for (int i = 0; i < 16; ++i) blk->qs[i] = PackNibbles(q[i], q[i + 16]);
  });
}

// The 5th bits of q[0..32) as the little-endian u32 qh, the low nibbles as Q4_0's.
template <class Block>
void PackQ5(const uint8_t* q, Block* blk) {
  uint32_t qh = 0;
  for (int i = 0; i < 32; ++i) qh |= static_cast<uint32_t>(q[i] >> 4) << i;
  std::memcpy(blk->qh, &qh, 4);
  for (int i = 0; i < 16; ++i) blk->qs[i] = PackNibbles(q[i], q[i + 16] & 0xF);
}

void QuantizeQ5_1(const float* x, int64_t nb, BlockQ5_1* y) {
  QuantizeAffine(x, nb, 31, y, [](const uint8_t* q, BlockQ5_1* blk) { PackQ5(q, blk); });
}

// Q5_0: d = max / -16 (max: the signed value of largest magnitude), q = trunc(x / d + 16.5).
void QuantizeQ5_0(const float* x, int64_t nb, BlockQ5_0* y) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    const float d = SignedAmax(x, 32) / -16.0f;
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    uint8_t q[32];
    for (int i = 0; i < 32; ++i) {
      q[i] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::trunc(x[i] * id + 16.5f)), 0, 31));
    }
    y[b].d = F32ToF16(d);
    PackQ5(q, &y[b]);
  }
}

// MXFP4: the shared exponent e = floor(log2(amax)) - 2 + 127 puts amax in the top binade of
// the E2M1 grid; each value takes the nearest grid point (first on ties). gguf-py wraps e
// for amax < 2^-125 (its uint8 cast); here e clamps to [0, 255] instead.
void QuantizeMXFP4(const float* x, int64_t nb, BlockMXFP4* y) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
    int e = 0;
    if (amax > 0.0f) e = std::clamp(static_cast<int>(std::floor(std::log2(amax)) - 2.0f + 127.0f), 0, 255);
    y[b].e = static_cast<uint8_t>(e);
    const float d = E8M0ToF32Half(y[b].e);
    for (int i = 0; i < 16; ++i) y[b].qs[i] = PackNibbles(Nearest(x[i], d, kMxfp4Values), Nearest(x[i + 16], d, kMxfp4Values));
  }
}

// ---- Simple fits (not llama.cpp's searched ones).

// x ~ d * sc[j] * q - dmin * m[j] over nsub sub-blocks of len: each sub-block's range
// [min(0, lo), max(0, hi)] maps onto q in [0, qmax]; the sub-block scales and mins are
// quantized to [0, smax] against d = max scale / smax and dmin = max min / smax (f16), and q
// is rounded against the dequantized step and offset, so the error is at most half a step
// plus the scale rounding. Q4_K's fit since its introduction; Q2_K and Q5_K use it too.
struct MinMaxFit {
  uint16_t d, dmin;  // f16
  uint8_t sc[16], m[16];
  uint8_t q[256];
};
void FitMinMax(const float* x, int nsub, int len, int qmax, int smax, MinMaxFit* f) {
  float scale[16], min[16];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < nsub; ++j) {
    float lo = 0.0f, hi = 0.0f;  // the fitted range always holds 0
    for (int i = 0; i < len; ++i) {
      lo = std::min(lo, x[len * j + i]);
      hi = std::max(hi, x[len * j + i]);
    }
    scale[j] = (hi - lo) / static_cast<float>(qmax);
    min[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, min[j]);
  }
  f->d = F32ToF16(max_scale / static_cast<float>(smax));
  f->dmin = F32ToF16(max_min / static_cast<float>(smax));
  const float d = F16ToF32(f->d), dmin = F16ToF32(f->dmin);
  for (int j = 0; j < nsub; ++j) {
    f->sc[j] = d > 0.0f ? static_cast<uint8_t>(std::clamp<long>(std::lround(scale[j] / d), 0, smax)) : 0;
    f->m[j] = dmin > 0.0f ? static_cast<uint8_t>(std::clamp<long>(std::lround(min[j] / dmin), 0, smax)) : 0;
    const float step = d * f->sc[j], off = dmin * f->m[j];
    for (int i = 0; i < len; ++i) {
      const float v = step > 0.0f ? (x[len * j + i] + off) / step : 0.0f;
      f->q[len * j + i] = static_cast<uint8_t>(std::clamp<long>(std::lround(v), 0, qmax));
    }
  }
}

// ggml's 12-byte packing of eight 6-bit scales and mins (Q4_K, Q5_K; read by Q4KScaleMin).
void PackQ4KScales(const uint8_t* sc, const uint8_t* m, uint8_t* scales) {
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

void QuantizeQ4_K(const float* x, int64_t nb, BlockQ4_K* y) {
  MinMaxFit f;
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    FitMinMax(x, 8, 32, 15, 63, &f);
    y[b].d = f.d;
    y[b].dmin = f.dmin;
    PackQ4KScales(f.sc, f.m, y[b].scales);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) y[b].qs[32 * c + l] = PackNibbles(f.q[64 * c + l], f.q[64 * c + 32 + l]);
    }
  }
}

void QuantizeQ5_K(const float* x, int64_t nb, BlockQ5_K* y) {
  MinMaxFit f;
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    FitMinMax(x, 8, 32, 31, 63, &f);
    y[b].d = f.d;
    y[b].dmin = f.dmin;
    PackQ4KScales(f.sc, f.m, y[b].scales);
    std::memset(y[b].qh, 0, sizeof(y[b].qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q0 = f.q[64 * c + l], q1 = f.q[64 * c + 32 + l];
        y[b].qs[32 * c + l] = PackNibbles(q0 & 0xF, q1 & 0xF);
        y[b].qh[l] |= static_cast<uint8_t>(((q0 >> 4) << (2 * c)) | ((q1 >> 4) << (2 * c + 1)));
      }
    }
  }
}

void QuantizeQ2_K(const float* x, int64_t nb, BlockQ2_K* y) {
  MinMaxFit f;
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    FitMinMax(x, 16, 16, 3, 15, &f);
    y[b].d = f.d;
    y[b].dmin = f.dmin;
    for (int j = 0; j < 16; ++j) y[b].scales[j] = PackNibbles(f.sc[j], f.m[j]);
    std::memset(y[b].qs, 0, sizeof(y[b].qs));
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, s = (e % 128) / 32, l = e % 32;
      y[b].qs[32 * h + l] |= static_cast<uint8_t>(f.q[e] << (2 * s));
    }
  }
}

// x ~ d * l[j] * v over sub-blocks of len with v in [-qneg, qneg - 1] (Q3_K, Q6_K): each
// sub-block's signed amax maps onto -qneg; the sub-block scales are quantized to
// [-smax - 1, smax] against d = max |scale| / smax (f16); v rounds against the dequantized
// step d * l[j] (f32, as the dequantization computes it).
struct SymFit {
  uint16_t d;  // f16
  int8_t l[16];
  int8_t v[256];
};
void FitSymmetric(const float* x, int nsub, int len, int qneg, int smax, SymFit* f) {
  float scale[16], max_abs = 0.0f;
  for (int j = 0; j < nsub; ++j) {
    scale[j] = SignedAmax(x + len * j, len) / static_cast<float>(-qneg);
    max_abs = std::max(max_abs, std::fabs(scale[j]));
  }
  f->d = F32ToF16(max_abs / static_cast<float>(smax));
  const float d = F16ToF32(f->d);
  for (int j = 0; j < nsub; ++j) {
    f->l[j] = d > 0.0f ? static_cast<int8_t>(std::clamp<long>(std::lround(scale[j] / d), -smax - 1, smax)) : 0;
    const float step = d * static_cast<float>(f->l[j]);
    for (int i = 0; i < len; ++i) {
      const float v = step != 0.0f ? x[len * j + i] / step : 0.0f;
      f->v[len * j + i] = static_cast<int8_t>(std::clamp<long>(std::lround(v), -qneg, qneg - 1));
    }
  }
}

void QuantizeQ3_K(const float* x, int64_t nb, BlockQ3_K* y) {
  SymFit f;
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    FitSymmetric(x, 16, 16, 4, 31, &f);
    BlockQ3_K& blk = y[b];
    blk.d = f.d;
    std::memset(blk.scales, 0, sizeof(blk.scales));
    for (int j = 0; j < 16; ++j) {  // the inverse of Q3KScales
      const int u = f.l[j] + 32;
      blk.scales[j % 8] |= static_cast<uint8_t>((u & 0xF) << (4 * (j / 8)));
      blk.scales[8 + j % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (j / 4)));
    }
    std::memset(blk.hmask, 0, sizeof(blk.hmask));
    std::memset(blk.qs, 0, sizeof(blk.qs));
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, s = (e % 128) / 32, l = e % 32;
      const int q = f.v[e] + 4;  // 0..7: bit 2 set means "no -4 offset"
      blk.qs[32 * h + l] |= static_cast<uint8_t>((q & 3) << (2 * s));
      blk.hmask[l] |= static_cast<uint8_t>((q >> 2) << (4 * h + s));
    }
  }
}

void QuantizeQ6_K(const float* x, int64_t nb, BlockQ6_K* y) {
  SymFit f;
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    FitSymmetric(x, 16, 16, 32, 127, &f);
    BlockQ6_K& blk = y[b];
    blk.d = f.d;
    std::memcpy(blk.scales, f.l, 16);
    std::memset(blk.ql, 0, sizeof(blk.ql));
    std::memset(blk.qh, 0, sizeof(blk.qh));
    for (int e = 0; e < 256; ++e) {  // the layout of BlockQ6_K's comment
      const int h = e / 128, g = (e % 128) / 32, l = e % 32;
      const int q = f.v[e] + 32;  // 0..63
      blk.ql[64 * h + l + 32 * (g % 2)] |= static_cast<uint8_t>((q & 0xF) << (g >= 2 ? 4 : 0));
      blk.qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * g));
    }
  }
}

// IQ4_NL: d = max / -127 (the signed amax lands on the grid's -127), each value the
// nearest grid point.
void QuantizeIQ4_NL(const float* x, int64_t nb, BlockIQ4_NL* y) {
  for (int64_t b = 0; b < nb; ++b, x += 32) {
    y[b].d = F32ToF16(SignedAmax(x, 32) / -127.0f);
    const float d = F16ToF32(y[b].d);
    for (int i = 0; i < 16; ++i) y[b].qs[i] = PackNibbles(Nearest(x[i], d, kIq4NlValues), Nearest(x[i + 16], d, kIq4NlValues));
  }
}

// IQ4_XS: per sub-block of 32 the IQ4_NL scale, quantized to ls - 32 in [-32, 31] against
// d = max |scale| / 31 (f16); values the nearest point of the scaled grid.
void QuantizeIQ4_XS(const float* x, int64_t nb, BlockIQ4_XS* y) {
  for (int64_t b = 0; b < nb; ++b, x += 256) {
    float scale[8], max_abs = 0.0f;
    for (int j = 0; j < 8; ++j) {
      scale[j] = SignedAmax(x + 32 * j, 32) / -127.0f;
      max_abs = std::max(max_abs, std::fabs(scale[j]));
    }
    BlockIQ4_XS& blk = y[b];
    blk.d = F32ToF16(max_abs / 31.0f);
    const float d = F16ToF32(blk.d);
    blk.scales_h = 0;
    std::memset(blk.scales_l, 0, sizeof(blk.scales_l));
    for (int j = 0; j < 8; ++j) {
      const long l = d > 0.0f ? std::clamp<long>(std::lround(scale[j] / d), -32, 31) : 0;
      const int ls = static_cast<int>(l) + 32;
      blk.scales_l[j / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (j % 2)));
      blk.scales_h = static_cast<uint16_t>(blk.scales_h | ((ls >> 4) << (2 * j)));
      const float dl = d * static_cast<float>(l);
      const float* xs = x + 32 * j;
      for (int i = 0; i < 16; ++i) {
        blk.qs[16 * j + i] = PackNibbles(Nearest(xs[i], dl, kIq4NlValues), Nearest(xs[i + 16], dl, kIq4NlValues));
      }
    }
  }
}

}  // namespace

void QuantizeRowFit(const float* src, int64_t n, DType type, void* dst) {
  const int64_t nb = n / DTypeBlockElems(type);
  switch (type) {
    case DType::kQ8_0: QuantizeQ8_0(src, nb, static_cast<BlockQ8_0*>(dst)); break;
    case DType::kQ4_0: QuantizeQ4_0(src, nb, static_cast<BlockQ4_0*>(dst)); break;
    case DType::kQ4_1: QuantizeQ4_1(src, nb, static_cast<BlockQ4_1*>(dst)); break;
    case DType::kQ5_0: QuantizeQ5_0(src, nb, static_cast<BlockQ5_0*>(dst)); break;
    case DType::kQ5_1: QuantizeQ5_1(src, nb, static_cast<BlockQ5_1*>(dst)); break;
    case DType::kMXFP4: QuantizeMXFP4(src, nb, static_cast<BlockMXFP4*>(dst)); break;
    case DType::kQ2_K: QuantizeQ2_K(src, nb, static_cast<BlockQ2_K*>(dst)); break;
    case DType::kQ3_K: QuantizeQ3_K(src, nb, static_cast<BlockQ3_K*>(dst)); break;
    case DType::kQ4_K: QuantizeQ4_K(src, nb, static_cast<BlockQ4_K*>(dst)); break;
    case DType::kQ5_K: QuantizeQ5_K(src, nb, static_cast<BlockQ5_K*>(dst)); break;
    case DType::kQ6_K: QuantizeQ6_K(src, nb, static_cast<BlockQ6_K*>(dst)); break;
    case DType::kIQ4_NL: QuantizeIQ4_NL(src, nb, static_cast<BlockIQ4_NL*>(dst)); break;
    case DType::kIQ4_XS: QuantizeIQ4_XS(src, nb, static_cast<BlockIQ4_XS*>(dst)); break;
    default: break;
  }
}

}  // namespace tessera::internal
