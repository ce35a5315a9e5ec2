// Device-side pieces of the GGML block formats (common/quant.h) shared by the
// kernels that decode quantized weights (dequant.cu, quant_gemv.cu). Included only
// by .cu files. Every function reproduces the host reference (common/quant.cc,
// common/dtype.cc) bit for bit.
#pragma once

#include <cstdint>

#include "common/quant.h"
#include "kernels/cuda/compat.cuh"

namespace tessera::kernels::cuda::quant {

// Exactness. Weights are computed with the f32 operations of DequantizeRow, in its
// order, each rounded on its own. nvcc contracts a * b + c into one FMA by default
// (a single rounding), so products and sums go through __fmul_rn / __fadd_rn, which
// it never contracts. The emulator build is compiled by the host compiler, which
// contracts only where FMA instructions are enabled (-march=native, or GCC's C++
// default -ffp-contract=fast with -mfma): the volatile temporary rules that out there.
// (In these formats every product that an add follows is exact in f32 -- an f16
// scale's 11 significant bits times at most 6 + 5 -- so a contraction would not change
// a value today; the explicit rounding keeps that from resting on the argument.)
__device__ __forceinline__ float Mul(float a, float b) {
#if defined(TESSERA_CUDA_EMU)
  volatile float r = a * b;
  return r;
#else
  return __fmul_rn(a, b);
#endif
}
__device__ __forceinline__ float Add(float a, float b) {
#if defined(TESSERA_CUDA_EMU)
  volatile float r = a + b;
  return r;
#else
  return __fadd_rn(a, b);
#endif
}
// a - b is a + (-b) exactly in IEEE arithmetic (signed zeros included).
__device__ __forceinline__ float Sub(float a, float b) { return Add(a, -b); }

// The f16 at p (little-endian, any alignment) as f32, bit for bit F16ToF32 of
// common/dtype.cc: subnormals (mant * 2^-24, exact), infinities and NaN payloads.
__device__ __forceinline__ float HalfAt(const uint8_t* p) {
  const uint32_t h = p[0] | static_cast<uint32_t>(p[1]) << 8;
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  if (exp == 0) return __uint_as_float(__float_as_uint(Mul(static_cast<float>(mant), 0x1p-24f)) | sign);
  return __uint_as_float(sign | (exp == 31 ? 0x7f800000u : (exp + 112) << 23) | mant << 13);
}

// common/quant.h's E8M0ToF32Half: 2^(e - 128), subnormal for e < 2.
__device__ __forceinline__ float E8M0Half(uint32_t e) {
  return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

// The 16-entry value tables of common/quant.h as two 64-bit words each (scalar
// constexprs are usable in device code; the host arrays are not).
constexpr uint64_t PackTable(const int8_t* v, int half) {
  uint64_t r = 0;
  for (int i = 7; i >= 0; --i) r = r << 8 | static_cast<uint8_t>(v[8 * half + i]);
  return r;
}
inline constexpr uint64_t kIq4Lo = PackTable(kIq4NlValues, 0), kIq4Hi = PackTable(kIq4NlValues, 1);
inline constexpr uint64_t kFp4Lo = PackTable(kMxfp4Values, 0), kFp4Hi = PackTable(kMxfp4Values, 1);
__device__ __forceinline__ float TableValue(uint64_t lo, uint64_t hi, int idx) {
  return static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>((idx < 8 ? lo : hi) >> (8 * (idx & 7)))));
}

// Value i (< 32) of a 32-element nibble array in Q4_0's order.
__device__ __forceinline__ int Nibble(const uint8_t* qs, int i) { return i < 16 ? qs[i] & 0xF : qs[i - 16] >> 4; }
// Bit i of Q5_0/Q5_1's qh (a little-endian u32).
__device__ __forceinline__ int HighBit(const uint8_t* qh, int i) { return (qh[i / 8] >> (i % 8)) & 1; }

// Q4KScaleMin of common/quant.h: sub-block j's 6-bit scale and min (Q4_K, Q5_K).
__device__ __forceinline__ void ScaleMin(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

}  // namespace tessera::kernels::cuda::quant
