// Internal to kernels/cpu: what the SIMD kernels of the 256-element weight types (Q2_K,
// Q3_K, Q5_K, Q6_K, IQ4_XS) share. kquant_scalar.cc defines their arithmetic from the
// blocks directly; kquant_avx2.cc and kquant_avx512.cc first unpack each column's
// super-block with an UnpackFn, then compute the same integers from the unpacked form:
//   q[256]  the element values, unsigned bytes (int8 when is_signed: IQ4_XS's table
//           values), in element order;
//   sc[16]  the integer scale of each 16 elements (int8; a 32-element sub-block's
//           scale is repeated for both halves);
//   mn[16]  the integer min of each 16 elements (types with has_min; else untouched);
// so that, with bs16_j the activation sums per 16 (QuantActs::sums16) and z the zero
// point 1 << zero_shift (none when zero_shift < 0):
//   isc = sum_j sc[j] * (dot16_j(q, xq) - z * bs16_j),   imin = sum_j mn[j] * bs16_j.
// Splitting a 32-element sub-block into two halves of equal scale leaves these integers
// unchanged, so they equal the scalar kernels' exactly.
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace tessera::kernels::cpu::internal::kq {

using UnpackFn = void (*)(const uint8_t* block, uint8_t* q, int8_t* sc, uint8_t* mn);

struct Traits {
  int block_bytes = 0;
  int zero_shift = -1;     // log2 of the zero point subtracted from q; -1: none
  bool is_signed = false;  // q holds int8 values (IQ4_XS)
  bool has_min = false;    // a second fma with -dmin * imin (Q2_K, Q5_K)
  int d_off = 0;           // byte offset of the f16 d in the block
  int dmin_off = 0;        // and of dmin (has_min only)
};

constexpr Traits TraitsOf(DType t) {
  switch (t) {
    case DType::kQ2_K: return {84, -1, false, true, 80, 82};
    case DType::kQ3_K: return {110, 2, false, false, 108, 0};
    case DType::kQ5_K: return {176, -1, false, true, 0, 2};
    case DType::kQ6_K: return {210, 5, false, false, 208, 0};
    case DType::kIQ4_XS: return {136, -1, true, false, 0, 0};
    default: return {};
  }
}

// The types these kernels serve.
constexpr bool IsKQuantKernelType(DType t) { return TraitsOf(t).block_bytes != 0; }

// The unpacker of t (kquant_avx2.cc: AVX2 code, call only when UseAvx2()).
UnpackFn UnpackAvx2(DType t);

}  // namespace tessera::kernels::cpu::internal::kq
