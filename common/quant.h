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

// Quantizes n f32 values (n a multiple of DTypeBlockElems(type)) into dst
// (n / BlockElems blocks). type must be quantized. Deterministic; llama.cpp's
// reference rounding for Q8_0/Q4_0, a min/max fit for Q4_K.
void QuantizeRow(const float* src, int64_t n, DType type, void* dst);

// Inverse: n values of a quantized row (or of an f32/f16/bf16 row) to f32.
void DequantizeRow(const void* src, DType type, int64_t n, float* dst);

}  // namespace tessera
