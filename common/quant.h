// GGML block-quantized weight formats (byte-exact with GGUF files) and their
// reference quantizers/dequantizers. Scalar and portable: the loaders, synth and
// the tests use these; the fast dot products live in kernels/cpu.
//
// A quantized row of n elements is n / BlockElems consecutive blocks. Values:
//   Q8_0: x[i] = d * qs[i]                               (d f16, qs int8[32])
//   Q4_0: x[i] = d * (nibble[i] - 8); nibble i < 16 is the low nibble of qs[i],
//         nibble i >= 16 the high nibble of qs[i - 16]   (d f16, qs uint8[16])
//   Q4_K: 256 elements in 8 sub-blocks of 32 with 6-bit scale sc[j] and min m[j]
//         packed in `scales`; x = d*sc[j]*q - dmin*m[j], q a 4-bit value. Chunk c
//         of 64 elements: element 64c + l (l < 32) is the low nibble of qs[32c + l],
//         element 64c + 32 + l its high nibble.
// The other types (Q4_1 .. MXFP4 below) follow ggml's definitions exactly; each struct
// says how its values decode. Conformance is checked bitwise against llama.cpp's
// gguf-py (tests/reference/).
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace tessera {

struct BlockQ8_0 {
  uint16_t d;  // f16
  int8_t qs[32];
};
struct BlockQ4_0 {
  uint16_t d;  // f16
  uint8_t qs[16];
};
struct BlockQ4_K {
  uint16_t d;     // f16 scale of the 6-bit scales
  uint16_t dmin;  // f16 scale of the 6-bit mins
  uint8_t scales[12];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_K) == 144);

// x[i] = d * q[i] + m; q[i] is nibble i as in Q4_0.
struct BlockQ4_1 {
  uint16_t d, m;  // f16
  uint8_t qs[16];
};
// x[i] = d * (q[i] - 16); q[i] = nibble i (as in Q4_0) | bit i of qh (little-endian u32) << 4.
struct BlockQ5_0 {
  uint16_t d;  // f16
  uint8_t qh[4];
  uint8_t qs[16];
};
// x[i] = d * q[i] + m; q[i] as in Q5_0.
struct BlockQ5_1 {
  uint16_t d, m;  // f16
  uint8_t qh[4];
  uint8_t qs[16];
};
// 16 sub-blocks of 16; scales[j]: low nibble scale, high nibble min;
// x = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4), q a 2-bit value. Each half h of
// 128 elements uses qs[32h .. 32h+32): element 128h + 32s + l (s = 0..3 the shift pair,
// l < 32) is (qs[32h + l] >> 2s) & 3, in sub-block 8h + 2s + l / 16.
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d, dmin;  // f16
};
// 16 sub-blocks of 16 with 6-bit scales sc[j] packed in `scales` (ggml's kmask layout);
// x = d * (sc[j] - 32) * (q - (hmask bit set ? 0 : 4)), q a 2-bit value laid out as
// Q2_K's; element 128h + 32s + l takes bit (4h + s) of hmask[l].
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;  // f16
};
// As Q4_K with a fifth bit: element 64c + l (l < 32) adds bit 2c of qh[l] << 4, element
// 64c + 32 + l bit 2c + 1 of qh[l] << 4; scales/mins as Q4_K (Q4KScaleMin).
struct BlockQ5_K {
  uint16_t d, dmin;  // f16
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// 16 sub-blocks of 16 with int8 scales; x = d * scales[j] * (q - 32), q a 6-bit value:
// in half h (128 elements, ql + 64h, qh + 32h), for l < 32:
//   element 128h + l      = (ql[l] & 15)      | ((qh[l] >> 0) & 3) << 4
//   element 128h + 32 + l = (ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4
//   element 128h + 64 + l = (ql[l] >> 4)      | ((qh[l] >> 4) & 3) << 4
//   element 128h + 96 + l = (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4
// and element e's scale is scales[e / 16].
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;  // f16
};
// x[i] = d * kIq4NlValues[nibble i] (nibble layout of Q4_0).
struct BlockIQ4_NL {
  uint16_t d;  // f16
  uint8_t qs[16];
};
// 8 sub-blocks of 32; 6-bit scale ls[j] = (scales_l[j / 2] >> 4 (j % 2)) & 15 |
// ((scales_h >> 2j) & 3) << 4; x = d * (ls[j] - 32) * kIq4NlValues[nibble], sub-block j's
// nibbles in qs[16j .. 16j+16) laid out as Q4_0's.
struct BlockIQ4_XS {
  uint16_t d;  // f16
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
// OCP MX FP4 (E2M1) with a shared E8M0 exponent: x[i] = kMxfp4Values[nibble i] * 2^(e - 128)
// (the table holds the E2M1 values doubled); nibble layout of Q4_0.
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24 &&
              sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ5_K) == 176 &&
              sizeof(BlockQ6_K) == 210 && sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136 &&
              sizeof(BlockMXFP4) == 17);

inline constexpr int8_t kIq4NlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// Sub-block j (0..7) scale and min of a Q4_K block.
inline void Q4KScaleMin(const uint8_t* scales, int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// Sub-block j (0..15) scale of a Q3_K block, as the signed value sc - 32 (-32..31):
// low 4 bits from scales[j % 8] (nibble j / 8), high 2 bits from scales[8 + j % 4]
// (bits 2 (j / 4) .. +1).
inline void Q3KScales(const uint8_t* scales, int8_t* out) {
  for (int j = 0; j < 16; ++j) {
    const int lo = (scales[j % 8] >> (4 * (j / 8))) & 0xF;
    const int hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = static_cast<int8_t>((lo | (hi << 4)) - 32);
  }
}

// Sub-block j (0..7) 6-bit scale of an IQ4_XS block (0..63; the value used is ls - 32).
inline int IQ4XSScale(const BlockIQ4_XS& b, int j) {
  return ((b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b.scales_h >> (2 * j)) & 3) << 4);
}

// ggml's E8M0 exponent to f32, halved (2^(e - 128); the MXFP4 table holds values doubled).
inline float E8M0ToF32Half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// Quantizes n f32 values (n a multiple of DTypeBlockElems(type)) into dst
// (n / BlockElems blocks). type must be quantized. Deterministic: byte-equal to gguf-py's
// quantize for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and MXFP4; a simple min/max or amax fit for
// the K-quants and IQ4 (common/quant_fit.h says which and how good).
void QuantizeRow(const float* src, int64_t n, DType type, void* dst);

// Inverse: n values of a quantized row (or of an f32/f16/bf16 row) to f32.
void DequantizeRow(const void* src, DType type, int64_t n, float* dst);

}  // namespace tessera
