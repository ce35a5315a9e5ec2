// What the kernels of the 32-element types (quant32_*.cc) share: the dispatch over the
// types, where each block's fields lie, and the byte tables of the table types (IQ4_NL,
// MXFP4) for vpshufb on nibbles. Plain code: no target flags needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/dtype.h"
#include "common/quant.h"

namespace tessera::kernels::cpu::internal {

// Byte offsets inside one block (common/quant.h's structs).
struct Layout32 {
  int64_t bytes = 0;  // block size
  int qs = 0;         // the 16 nibble bytes (Q4_0's order: element l < 16 low, 16 + l high)
  int qh = -1;        // the little-endian u32 of fifth bits (bit l: element l); -1: none
  bool min = false;   // an f16 min at offset 2 (Q4_1, Q5_1: the second fma)
  bool e8m0 = false;  // scale: an E8M0 byte at 0 (MXFP4), else an f16 d at 0
};

constexpr Layout32 LayoutOf(DType t) {
  switch (t) {
    case DType::kQ4_1: return {sizeof(BlockQ4_1), offsetof(BlockQ4_1, qs), -1, true, false};
    case DType::kQ5_0: return {sizeof(BlockQ5_0), offsetof(BlockQ5_0, qs), offsetof(BlockQ5_0, qh), false, false};
    case DType::kQ5_1: return {sizeof(BlockQ5_1), offsetof(BlockQ5_1, qs), offsetof(BlockQ5_1, qh), true, false};
    case DType::kIQ4_NL: return {sizeof(BlockIQ4_NL), offsetof(BlockIQ4_NL, qs), -1, false, false};
    case DType::kMXFP4: return {sizeof(BlockMXFP4), offsetof(BlockMXFP4, qs), -1, false, true};
    default: return {};
  }
}
static_assert(offsetof(BlockQ4_1, m) == 2 && offsetof(BlockQ5_1, m) == 2 && offsetof(BlockMXFP4, e) == 0);

// Calls f(std::integral_constant<DType, T>{}) when t is one of the 32-element types T
// (Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4); does nothing for other types.
template <class F>
void Visit32(DType t, F&& f) {
  switch (t) {
    case DType::kQ4_1: return f(std::integral_constant<DType, DType::kQ4_1>{});
    case DType::kQ5_0: return f(std::integral_constant<DType, DType::kQ5_0>{});
    case DType::kQ5_1: return f(std::integral_constant<DType, DType::kQ5_1>{});
    case DType::kIQ4_NL: return f(std::integral_constant<DType, DType::kIQ4_NL>{});
    case DType::kMXFP4: return f(std::integral_constant<DType, DType::kMXFP4>{});
    default: return;
  }
}

struct Table16 {
  alignas(16) uint8_t b[16];
};

// t[i] = v[i] + add as a byte (the kernels pick add so that every entry is 0..255).
constexpr Table16 MakeTable(const int8_t (&v)[16], int add) {
  Table16 t{};
  for (int i = 0; i < 16; ++i) t.b[i] = static_cast<uint8_t>(v[i] + add);
  return t;
}

// MXFP4 values + 12 are 0..24: unsigned for maddubs/vpdpbusd, small enough for int16 sums.
inline constexpr int32_t kMxfp4Offset = 12;
inline constexpr Table16 kMxfp4Table = MakeTable(kMxfp4Values, kMxfp4Offset);
// IQ4_NL: the signed values (AVX2 moves their signs onto x) ...
inline constexpr Table16 kIq4Table = MakeTable(kIq4NlValues, 0);
// ... and values + 128 (1..241, unsigned for vpdpbusd, which does not saturate).
inline constexpr int32_t kIq4Offset = 128;
inline constexpr Table16 kIq4Table128 = MakeTable(kIq4NlValues, kIq4Offset);

}  // namespace tessera::kernels::cpu::internal
