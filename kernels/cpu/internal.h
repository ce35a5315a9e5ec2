// Single-threaded range workers behind the public ops (ops.h). ops.cc owns
// dispatch (scalar vs AVX2) and threading; these compute one contiguous range and
// never look at other rows, so partitioning cannot change any value.
// The *Avx2 functions live in *_avx2.cc and may only be called when UseAvx2(); the
// *Avx512 ones live in *_avx512.cc and may only be called when UseAvx512Vnni().
#pragma once

#include <cstdint>

#include "common/dtype.h"
#include "kernels/cpu/ops.h"

namespace tessera::kernels::cpu::internal {

// Linear output columns [n_begin, n_end) for all m rows.
void LinearColsScalar(const float* x, int64_t m, int64_t k, const void* w, DType w_type,
                      int64_t n_begin, int64_t n_end, const float* bias, float* y,
                      int64_t ldy);
void LinearColsAvx2(const float* x, int64_t m, int64_t k, const void* w, DType w_type,
                    int64_t n_begin, int64_t n_end, const float* bias, float* y,
                    int64_t ldy);

// Activations quantized per row for the int8 dot products with block-quantized
// weights (one buffer per Linear call, written by QuantizeActs*, read by all threads).
// Per row of k: q int8 [k]; d f32 scale per block of ActBlock(w_type) (x ~ d * q);
// sums int16 per 32 values (sum of q, for Q4_0's -8 offset and Q4_K's mins); sums16
// per 16 values (llama.cpp's Q8_K bsums: for the offsets, scales and mins per 16 of
// Q2_K/Q3_K/Q6_K; |sum| <= 2032), only where NeedsSums16(w_type), else null.
struct QuantActs {
  const int8_t* q = nullptr;     // [m, k]
  const float* d = nullptr;      // [m, k / ActBlock]
  const int16_t* sums = nullptr;  // [m, k / 32]
  int64_t m = 0;
  int64_t k = 0;
  const int16_t* sums16 = nullptr;  // [m, k / 16]
};
// 32 for the 32-element types (Q8_0-style blocks), 256 for the K-quants and IQ4_XS
// (Q8_K-style blocks).
inline int64_t ActBlock(DType w_type) { return IsSuperBlockQuant(w_type) ? 256 : 32; }
// The 256-element types other than Q4_K read the sums per 16 (kquant.h).
inline bool NeedsSums16(DType w_type) {
  return IsSuperBlockQuant(w_type) && w_type != DType::kQ4_K;
}
// Quantizes rows [0, rows) of x (k a multiple of block): per block d = amax / 127,
// q = round-half-even(clamp(x / d, -127, 127)) (0 for NaN; d = NaN when the block
// has a NaN), then the sums of q (sums16 may be null: not computed). Scalar and AVX2
// produce identical bytes.
void QuantizeActsScalar(const float* x, int64_t rows, int64_t k, int64_t block, int8_t* q,
                        float* d, int16_t* sums, int16_t* sums16);
void QuantizeActsAvx2(const float* x, int64_t rows, int64_t k, int64_t block, int8_t* q,
                      float* d, int16_t* sums, int16_t* sums16);
// The sums of one quantized row of k (both QuantizeActs call it: one definition).
void QuantActSums(const int8_t* q, int64_t k, int16_t* sums, int16_t* sums16);
// Linear output columns [n_begin, n_end) of all a.m rows with quantized weights w
// (Q8_0/Q4_0/Q4_K and the 32-element types, rows of a.k). Per output element: s = 0; per weight block in k
// order, an exact int32 block dot, then s = fma(d_w * d_x, isum, s) (Q4_K: two fmas
// per 256-block, see quant_scalar.cc); y = s + bias. Scalar and AVX2 bitwise equal.
void LinearQuantColsScalar(const QuantActs& a, const void* w, DType w_type, int64_t n_begin,
                           int64_t n_end, const float* bias, float* y, int64_t ldy);
void LinearQuantColsAvx2(const QuantActs& a, const void* w, DType w_type, int64_t n_begin,
                         int64_t n_end, const float* bias, float* y, int64_t ldy);
// Q2_K, Q3_K, Q5_K, Q6_K, IQ4_XS (kquant_*.cc; arithmetic defined in kquant_scalar.cc):
// one output element of row i (scalar), and the column ranges (AVX2, AVX-512 VNNI).
float KQuantRowScalar(const QuantActs& a, int64_t i, const void* w_row, DType w_type);
void KQuantColsAvx2(const QuantActs& a, const void* w, DType w_type, int64_t n_begin,
                    int64_t n_end, const float* bias, float* y, int64_t ldy);
void KQuantColsAvx512(const QuantActs& a, const void* w, DType w_type, int64_t n_begin,
                      int64_t n_end, const float* bias, float* y, int64_t ldy);
// The 32-element types Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 (arithmetic: quant32_scalar.cc),
// entered from the three LinearQuantCols* above: y[i][j] before bias for weight row w_row
// (scalar), and column ranges like LinearQuantCols* (AVX2, AVX-512).
float LinearQuant32RowScalar(const QuantActs& a, int64_t i, const void* w_row, DType w_type);
void LinearQuant32ColsAvx2(const QuantActs& a, const void* w, DType w_type, int64_t n_begin,
                           int64_t n_end, const float* bias, float* y, int64_t ldy);
void LinearQuant32ColsAvx512(const QuantActs& a, const void* w, DType w_type, int64_t n_begin,
                             int64_t n_end, const float* bias, float* y, int64_t ldy);
// AVX-512 VNNI, bitwise equal to the above; only for types where
// LinearQuantAvx512Supports() (others take the AVX2 kernel).
inline bool LinearQuantAvx512Supports(DType w_type) {
  switch (w_type) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_K:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_XS:
    case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: case DType::kIQ4_NL: case DType::kMXFP4:
      return true;
    default: return false;
  }
}
// Whether the VNNI kernel is also the faster one for m rows: it transposes each weight
// block once per 64-row chunk, which at small m costs more than it saves (measured on
// Zen 4, 1 thread: Q4_0 even from m = 2; Q8_0 (two transposes per block) and Q4_K
// (scales unpacked per column) from m = 8).
// Bitwise equal results either way, so this choice never changes a value.
inline bool LinearQuantAvx512Preferred(DType w_type, int64_t m) {
  if (w_type == DType::kQ4_0) return m >= 2;
  if (w_type == DType::kQ2_K || w_type == DType::kQ3_K || w_type == DType::kQ5_K ||
      w_type == DType::kQ6_K || w_type == DType::kIQ4_XS)
    return m >= 4;  // 4096x4096, 1 thread: AVX2 faster at m = 1, even at 2, VNNI from 4
  switch (w_type) {  // the 32-element types, measured alike (Zen 4, 4096x4096, 1 thread)
    case DType::kIQ4_NL: case DType::kMXFP4: return m >= 2;  // table lookups cost AVX2 more
    case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: return m >= 4;
    default: break;
  }
  return (w_type == DType::kQ8_0 || w_type == DType::kQ4_K) && m >= 8;
}
void LinearQuantColsAvx512(const QuantActs& a, const void* w, DType w_type, int64_t n_begin,
                           int64_t n_end, const float* bias, float* y, int64_t ldy);
// Decode-sized Linear (kquant_gemv_avx2.cc, AVX2) for the 256-element types: dot products
// straight from the packed super-blocks, bitwise equal to the kernels above, for any m (rows
// in groups of up to kQuantGemvMaxM). Faster than the tiled kernels only at small m, hence
// QuantGemvPreferred (measured, 4096x4096 and 1024x128256, 1 thread, Zen 4: 1.2-1.9x at
// m = 1, 1.0-1.5x at m = 2; at m = 3 slower for Q4_K / Q5_K, so the tiled kernels from 3).
constexpr int64_t kQuantGemvMaxM = 2;
inline bool QuantGemvSupports(DType w_type) {
  return w_type == DType::kQ4_K || w_type == DType::kQ5_K || w_type == DType::kQ6_K ||
         w_type == DType::kIQ4_XS || w_type == DType::kQ2_K || w_type == DType::kQ3_K;
}
inline bool QuantGemvPreferred(DType w_type, int64_t m) {
  return QuantGemvSupports(w_type) && m <= kQuantGemvMaxM;
}
void QuantGemvColsAvx2(const QuantActs& a, const void* w, DType w_type, int64_t n_begin,
                       int64_t n_end, const float* bias, float* y, int64_t ldy);

// Rows [0, rows) of the elementwise/row ops (callers offset the pointers).
void RmsNormRowsScalar(const float* x, const float* weight, int64_t rows, int64_t dim,
                       float eps, float* out);
void RmsNormRowsAvx2(const float* x, const float* weight, int64_t rows, int64_t dim,
                     float eps, float* out);
void AddRmsNormRowsScalar(float* residual, const float* x, const float* weight, int64_t rows,
                          int64_t dim, float eps, float* out);
void AddRmsNormRowsAvx2(float* residual, const float* x, const float* weight, int64_t rows,
                        int64_t dim, float eps, float* out);
void SiluMulRowsScalar(const float* gate_up, int64_t rows, int64_t inter, float* out);
void SiluMulRowsAvx2(const float* gate_up, int64_t rows, int64_t inter, float* out);
void GeluTanhMulRowsScalar(const float* gate_up, int64_t rows, int64_t inter, float* out);
void GeluTanhMulRowsAvx2(const float* gate_up, int64_t rows, int64_t inter, float* out);
// x[i] = cap * tanh(x[i] / cap), i < n.
void SoftCapScalar(float* x, int64_t n, float cap);
void SoftCapAvx2(float* x, int64_t n, float cap);
void ConvertScalar(const void* src, DType type, int64_t count, float* dst);
void ConvertAvx2(const void* src, DType type, int64_t count, float* dst);
// Rope over (token, head) items [begin, end) with item = token * heads + head.
void RopeItemsScalar(float* x, int64_t heads, int64_t head_dim, int64_t x_stride,
                     int64_t rot_dim, const int32_t* positions, const float* cos_sin,
                     int64_t begin, int64_t end);
void RopeItemsAvx2(float* x, int64_t heads, int64_t head_dim, int64_t x_stride,
                   int64_t rot_dim, const int32_t* positions, const float* cos_sin,
                   int64_t begin, int64_t end);

// Attention over (token, q head) items [begin, end), item = token * q_heads + head.
void AttentionItemsScalar(const PagedAttentionArgs& a, int64_t begin, int64_t end);
void AttentionItemsAvx2(const PagedAttentionArgs& a, int64_t begin, int64_t end);

// Key range [lo, p] of a query at position p (sliding_window <= 0: no window).
inline int64_t FirstKey(int64_t p, int64_t sliding_window) {
  if (sliding_window <= 0) return 0;
  const int64_t lo = p - sliding_window + 1;
  return lo > 0 ? lo : 0;
}

}  // namespace tessera::kernels::cpu::internal
