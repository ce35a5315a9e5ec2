// Element types of weights and activations, and scalar conversions.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace tessera {

// kQ8_0 .. kMXFP4 are GGML's block-quantized weight formats (bit-exact with GGUF
// files; layouts in common/quant.h). They exist only as weight matrices whose row
// length is a multiple of the block size. The order of the enumerators carries no
// meaning (GGML's type ids are mapped in engine/gguf.cc).
enum class DType : uint8_t {
  kF32, kF16, kBF16, kI32, kI64,
  kQ8_0, kQ4_0, kQ4_K,
  kQ4_1, kQ5_0, kQ5_1, kQ2_K, kQ3_K, kQ5_K, kQ6_K, kIQ4_NL, kIQ4_XS, kMXFP4,
};

constexpr bool IsQuantized(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kI32:
    case DType::kI64: return false;
    default: return true;
  }
}

// The K-quant family (and IQ4_XS): 256-element super-blocks, whose Linear quantizes
// activations to 256-element int8 blocks (llama.cpp's Q8_K); the others use 32.
constexpr bool IsSuperBlockQuant(DType t) {
  return t == DType::kQ2_K || t == DType::kQ3_K || t == DType::kQ4_K || t == DType::kQ5_K ||
         t == DType::kQ6_K || t == DType::kIQ4_XS;
}

// Elements per block: 1 for plain types, 256 for the K-quants and IQ4_XS, 32 for the
// other quantized types.
constexpr int64_t DTypeBlockElems(DType t) {
  if (!IsQuantized(t)) return 1;
  return IsSuperBlockQuant(t) ? 256 : 32;
}

// Bytes per block (per element for plain types).
constexpr int64_t DTypeBlockBytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kQ8_0: return 34;
    case DType::kQ4_0: return 18;
    case DType::kQ4_K: return 144;
    case DType::kQ4_1: return 20;
    case DType::kQ5_0: return 22;
    case DType::kQ5_1: return 24;
    case DType::kQ2_K: return 84;
    case DType::kQ3_K: return 110;
    case DType::kQ5_K: return 176;
    case DType::kQ6_K: return 210;
    case DType::kIQ4_NL: return 18;
    case DType::kIQ4_XS: return 136;
    case DType::kMXFP4: return 17;
  }
  return 0;
}

// Bytes per element of a plain type; 0 for block-quantized types (use DTypeRowBytes).
constexpr int64_t DTypeSize(DType t) { return IsQuantized(t) ? 0 : DTypeBlockBytes(t); }

// Bytes of one row of `cols` elements; -1 when cols is not a multiple of the block.
constexpr int64_t DTypeRowBytes(DType t, int64_t cols) {
  const int64_t b = DTypeBlockElems(t);
  return cols % b != 0 ? -1 : cols / b * DTypeBlockBytes(t);
}

// "f32", "f16", "bf16", "i32", "i64", then GGML's names in lower case: "q8_0",
// "q4_k", "iq4_xs", "mxfp4", ...
std::string_view DTypeName(DType t);
// Parses our short names, safetensors' names ("F32", "BF16", ...) and GGML's
// ("Q8_0", "Q6_K", "IQ4_NL", "MXFP4", ...), in either case.
bool ParseDType(std::string_view name, DType* out);

inline float Bf16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round-to-nearest-even; NaN stays NaN.
inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);  // round-to-nearest-even, overflow to inf

}  // namespace tessera
