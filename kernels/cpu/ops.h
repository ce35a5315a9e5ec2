// CPU kernels: arithmetic only, no knowledge of requests or models.
//
// Every function here is batch-invariant (docs/architecture.md, "Batch invariance"): the value written for one
// output row depends only on that row's inputs, never on how many rows there are,
// how they are tiled, or how many threads run. Reductions run in a fixed order
// per output element. AVX2/FMA paths are chosen at run time (CpuFeatures());
// a scalar path runs elsewhere; quantized Linear also has an AVX-512 VNNI path,
// bitwise equal to both. Activations are f32; weights may be f32/f16/bf16 or
// block-quantized (common/quant.h: Q8_0/Q4_0/Q4_K, the 32-element Q4_1/Q5_0/Q5_1/IQ4_NL/MXFP4
// and the 256-element Q2_K/Q3_K/Q5_K/Q6_K/IQ4_XS) for Linear, Embedding, ConvertToF32.
//
// Layouts are dense row-major unless stated. `pool` may be null (single thread).
#pragma once

#include <cstdint>

#include "common/dtype.h"
#include "common/thread_pool.h"

namespace tessera::kernels::cpu {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  // AVX-512 F/BW/VL/VNNI all present AND the OS saves ZMM state (XCR0).
  bool avx512vnni = false;
};
const CpuFeatures& GetCpuFeatures();
// True when the AVX2/FMA kernels are in use (can be forced off with
// TESSERA_CPU_SCALAR=1 in the environment, read once).
bool UseAvx2();
// Testing only: forces the AVX2 (true) or scalar (false) kernels, overriding
// TESSERA_CPU_SCALAR. Returns false and changes nothing when AVX2 is requested on a
// CPU without AVX2/FMA/F16C. Not synchronized with kernels running concurrently.
bool SetUseAvx2ForTesting(bool use_avx2);
// Testing only: back to the detected default (features and TESSERA_CPU_SCALAR).
void ClearUseAvx2ForTesting();
// True when quantized Linear may use the AVX-512 VNNI kernels: requires
// UseAvx2() and CpuFeatures().avx512vnni; TESSERA_CPU_NO_AVX512=1 (read once)
// turns it off. Results are bitwise the same either way; only speed differs.
bool UseAvx512Vnni();
// The kernel quantized Linear runs for w_type and m rows: "vnni", "avx2", "gemv" (AVX2,
// decode-sized m) or "scalar" (by default each only where it is the faster one, see
// kernels/cpu/internal.h).
const char* QuantLinearPath(DType w_type, int64_t m);
// Testing only: forces VNNI on (true: for every quantized type and m) or off (false) while
// UseAvx2(). Returns false and changes nothing when VNNI is requested on a CPU
// without it.
bool SetUseAvx512VnniForTesting(bool use_vnni);
// Testing only: back to the detected default (features and TESSERA_CPU_NO_AVX512).
void ClearUseAvx512VnniForTesting();

// y[m, n] = sum_k x[m, k] * w[n, k] + (bias ? bias[n] : 0)
// x: [M, K] f32; w: [N, K] of w_type; bias: [N] f32 or null; y: [M, N] f32 with row
// stride ldy (>= N).
// f32/f16/bf16 weights: f32 FMA dot products (weights converted exactly).
// Quantized weights (K a multiple of the block, else abort): each x row is first
// quantized on its own to int8 blocks (32 values; 256 for the K-quants and IQ4_XS,
// with sums per 16 as llama.cpp's Q8_K): d = amax/127,
// q = round-half-even(x/d); then per weight block an exact integer dot, scaled by
// d_w * d_x and accumulated in f32 in k order (see kernels/cpu/quant_scalar.cc and
// quant32_scalar.cc; Q4_1/Q5_1 add their min times d_x * sum(x) as a second fma).
// So the result is the float64 product of the dequantized weights and the
// quantize-dequantized activations up to f32 rounding; AVX-512 VNNI, AVX2 and
// scalar are bitwise equal. A NaN in x makes its row NaN.
void Linear(const float* x, int64_t m, int64_t k, const void* w, DType w_type, int64_t n,
            const float* bias, float* y, int64_t ldy, ThreadPool* pool);

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight[:]   (rows x dim)
// out may alias x.
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
             float* out, ThreadPool* pool);

// residual[r, :] += x[r, :]; then out[r, :] = RmsNorm(residual[r, :]).
void AddRmsNorm(float* residual, const float* x, const float* weight, int64_t rows,
                int64_t dim, float eps, float* out, ThreadPool* pool);

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i]; gate_up is [rows, 2*inter].
void SiluMul(const float* gate_up, int64_t rows, int64_t inter, float* out, ThreadPool* pool);

// out[r, i] = gelu_tanh(gate_up[r, i]) * gate_up[r, inter + i] (GeGLU), where
// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated as the
// equal x / (1 + exp(-2 sqrt(2/pi) (x + 0.044715 x^3))). Within a few ulp of the
// exact value (scalar: libm exp; AVX2: the vector Exp); rows independent.
void GeluTanhMul(const float* gate_up, int64_t rows, int64_t inter, float* out, ThreadPool* pool);

// x[i] *= s, i < n.
void Scale(float* x, int64_t n, float s, ThreadPool* pool);

// x[i] = cap * tanh(x[i] / cap), i < n (logit soft-capping); cap > 0. Elementwise,
// so any split of x gives the same values.
void SoftCap(float* x, int64_t n, float cap, ThreadPool* pool);

// out[t, :] = table[ids[t], :] converted to f32 (DequantizeRow for quantized types).
// table: [vocab, dim] of type.
void Embedding(const void* table, DType type, int64_t dim, const int32_t* ids,
               int64_t num_tokens, float* out, ThreadPool* pool);

// Rotary embedding, "rotate half" (GPT-NeoX / HF Llama) convention, in place.
// x: [tokens, heads, head_dim] with row stride x_stride between tokens (floats);
// only the first rot_dim dims of each head rotate. cos_sin: [max_pos, rot_dim]
// where row p holds cos[0..rot_dim/2) then sin[0..rot_dim/2) for position p.
// For i < rot_dim/2:  x1 = x[i], x2 = x[i + rot_dim/2]
//   x[i] = x1*cos[i] - x2*sin[i];  x[i + rot_dim/2] = x2*cos[i] + x1*sin[i]
void Rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t x_stride,
          int64_t rot_dim, const int32_t* positions, const float* cos_sin, ThreadPool* pool);

// Paged KV cache layout (one layer): [num_blocks, block_size, num_kv_heads, head_dim] f32.
// Writes k/v rows of each token to cache slot slot_mapping[t]
// (= block_id * block_size + offset); slot < 0 means skip. k, v: [tokens, kv_heads*head_dim]
// with row strides k_stride / v_stride.
void WriteKv(const float* k, int64_t k_stride, const float* v, int64_t v_stride,
             int64_t tokens, int64_t kv_heads, int64_t head_dim, const int64_t* slot_mapping,
             float* k_cache, float* v_cache);

struct PagedAttentionArgs {
  const float* q = nullptr;   // [tokens, q_heads, head_dim], row stride q_stride floats
  int64_t q_stride = 0;
  const float* k_cache = nullptr;  // [num_blocks, block_size, kv_heads, head_dim]
  const float* v_cache = nullptr;
  int64_t num_tokens = 0;
  int64_t num_q_heads = 0;
  int64_t num_kv_heads = 0;       // q head h reads kv head h / (q_heads / kv_heads)
  int64_t head_dim = 0;
  int64_t block_size = 0;
  // Per query token: its absolute position p and its sequence's block table.
  // The query attends to keys at positions [max(0, p - sliding_window + 1), p]
  // (all of [0, p] when sliding_window <= 0), read through the block table.
  // A token with p < 0 (padding) gets zeros.
  const int32_t* positions = nullptr;       // [tokens]
  const int32_t* token_to_seq = nullptr;    // [tokens] -> row of block_tables
  const int32_t* block_tables = nullptr;    // [num_seqs, max_blocks_per_seq]
  int64_t max_blocks_per_seq = 0;
  int64_t sliding_window = 0;
  float scale = 1.0f;                       // applied to q.k
  // > 0: each scaled score s becomes softcap * tanh(s / softcap) before the softmax.
  float softcap = 0.0f;
  // Non-null: one logit S_h per q head joins every softmax denominator without a
  // value (gpt-oss attention sinks): m = max(max_j s_j, S_h), out = sum_j e^(s_j - m) v_j /
  // (sum_j e^(s_j - m) + e^(S_h - m)); the sink term is added after the keys' sum.
  const float* sinks = nullptr;             // [q_heads]
  float* out = nullptr;                     // [tokens, q_heads, head_dim] dense
};
// Causal softmax attention per (token, head), exact f32 softmax with max subtraction.
void PagedAttention(const PagedAttentionArgs& args, ThreadPool* pool);

// dst[i] = src[i] converted to f32 (weights into f32 scratch); quantized types need
// count to be a multiple of the block.
void ConvertToF32(const void* src, DType type, int64_t count, float* dst);

}  // namespace tessera::kernels::cpu
