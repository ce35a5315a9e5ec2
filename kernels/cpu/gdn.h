// Gated DeltaNet (linear attention with a recurrent state) on the CPU: the short causal
// conv1d with its ring of past inputs, the delta-rule core in grid-chunked (GC) form, and
// the gated RMSNorm of its output. Plain arrays and dimensions only; the engine maps its
// per-sequence state slots onto the pointers below.
//
// The GC form (README.md here, docs/architecture.md "Batch invariance"): positions are
// cut into chunks of kGdnChunk anchored at absolute positions (chunk j = [16j, 16j + 16)).
// A row's output is a function of the state S at its chunk start and of the earlier rows
// of its chunk only, computed by one row routine with one fixed reduction order per output
// element. Prefill and decode (the 1-row case) run that same routine, so a sequence's bits
// do not depend on how its tokens are split into calls, on the other sequences of a call,
// or on the thread count. S advances only when a chunk's last row is computed.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "common/thread_pool.h"

namespace tessera::kernels::cpu {

// Chunk length of the GC form. Part of the state's identity: the bits depend on it.
inline constexpr int64_t kGdnChunk = 16;

struct GdnDims {
  int64_t k_heads = 0;      // Hk (linear_num_key_heads)
  int64_t v_heads = 0;      // Hv (linear_num_value_heads), a multiple of Hk
  int64_t k_dim = 0;        // dk (linear_key_head_dim)
  int64_t v_dim = 0;        // dv (linear_value_head_dim)
  int64_t conv_kernel = 0;  // K (linear_conv_kernel_dim), >= 1
  // Which k-head v-head h reads: h / (Hv / Hk) ("grouped": HF, llama.cpp's qwen3next) or,
  // when tiled, h % Hk (llama.cpp's qwen35 / qwen35moe GGUF order).
  bool v_heads_tiled = false;

  int64_t conv_channels() const { return 2 * k_heads * k_dim + v_heads * v_dim; }
  int64_t state_floats() const { return v_heads * k_dim * v_dim; }  // S: [Hv, dk, dv]
  // The open-chunk buffer: kGdnChunk rows (row = position mod kGdnChunk) of
  // [k̂: Hk * dk | Γ: Hv | u: Hv * dv].
  int64_t open_row_floats() const { return k_heads * k_dim + v_heads + v_heads * v_dim; }
  int64_t open_floats() const { return kGdnChunk * open_row_floats(); }
};

// Ok when the kernels below can run on these dimensions, else InvalidArgument naming the
// HF config field that is wrong (callers check once, at load).
Status CheckGdnDims(const GdnDims& d);

// One sequence's rows for GdnConv: positions start .. start + rows - 1, in order.
struct GdnConvSeq {
  int64_t start = 0;
  int64_t rows = 0;
  const float* x = nullptr;  // [rows, channels]: the projected q|k|v inputs
  // [ring_rows, channels]: the input at position p lives in row p mod ring_rows. Must hold
  // positions start - K + 1 .. start - 1 (zeros for a fresh sequence: p < 0 reads as 0).
  // Positions max(start, start + rows - ring_rows) .. start + rows - 1 are written back.
  float* ring = nullptr;
  // >= K - 1. More lets a caller step back after speculation: a call ending at e may be
  // followed by one starting at s < e when ring_rows >= e - s + K - 1.
  int64_t ring_rows = 0;
  float* out = nullptr;   // [rows, channels]
};

// out[t, c] = SiLU(sum over j = 0..K-1, ascending, of w[c, j] * in(t - K + 1 + j, c)),
// weight [channels, K] (HF conv1d [channels, 1, K] and GGUF ssm_conv1d alike), no bias.
// Channels are split over the pool; each output is one fixed-order sum, so the split
// never changes a value. Sequences are independent (distinct rings and outputs).
void GdnConv(const GdnDims& d, const float* weight, const GdnConvSeq* seqs, int64_t num_seqs,
             ThreadPool* pool);

// One sequence's rows for GdnCore: positions start .. start + rows - 1.
struct GdnSeq {
  int64_t start = 0;
  int64_t rows = 0;
  const float* qkv = nullptr;  // [rows, conv_channels]: GdnConv's output (q | k | v, heads in order)
  const float* a = nullptr;    // [rows, Hv]: the decay projection
  const float* b = nullptr;    // [rows, Hv]: the beta projection
  // S at the chunk start floor(start / 16) * 16 ([Hv, dk, dv], zeros for a fresh sequence);
  // replaced by S at the next chunk start each time a call computes a chunk's last row.
  float* state = nullptr;
  // d.open_floats(): rows chunk_start .. start - 1 of the current chunk as earlier calls left
  // them; this call writes the rows it computes (row = position mod 16). Rows at or past
  // `start` are never read, so a caller may step back inside a chunk (speculation) freely.
  float* open = nullptr;
  float* out = nullptr;  // [rows, Hv * dv]: o_t per v-head
};

// Per-head parameters of a Gated DeltaNet layer.
struct GdnParams {
  const float* a_log = nullptr;    // [Hv]: g = -exp(a_log) * softplus(a + dt_bias)
  const float* dt_bias = nullptr;  // [Hv]
};

// Caller-owned scratch; grows with the largest call, reuse one per caller.
struct GdnScratch {
  std::vector<float> qhat;  // normalised, scaled q rows of one chunk segment per sequence
  std::vector<float> beta;  // beta per row and v-head, same segments
};

// The delta rule in GC form for each sequence (README.md "Gated DeltaNet"):
//   q̂ = q / sqrt(Σq² + 1e-6) / sqrt(dk), k̂ = k / sqrt(Σk² + 1e-6)   (per k-head)
//   g = -exp(a_log) softplus(a + dt_bias), β = sigmoid(b)            (per v-head, libm)
//   S_t = e^g S_{t-1} + k̂ β (v - e^g S_{t-1}ᵀ k̂)ᵀ,  o_t = S_tᵀ q̂
// evaluated chunk by chunk: with Γ_r the sum of g over the chunk's rows 0..r,
//   u_r = β_r (v_r - e^{Γ_r} S_sᵀ k̂_r - Σ_{m<r} e^{Γ_r - Γ_m} (k̂_r·k̂_m) u_m)
//   o_r = e^{Γ_r} S_sᵀ q̂_r + Σ_{m<=r} e^{Γ_r - Γ_m} (q̂_r·k̂_m) u_m
//   S_{s+16} = e^{Γ_15} S_s + Σ_m e^{Γ_15 - Γ_m} k̂_m u_mᵀ
// Work is split over (sequence, v-head, dv columns) on the pool; columns are independent,
// so the split never changes a value. Cost per row and v-head ≈ 3·dk·dv + 16·(dk + dv)
// multiply-adds. Not thread-safe on the same sequence buffers.
void GdnCore(const GdnDims& d, const GdnParams& p, const GdnSeq* seqs, int64_t num_seqs,
             GdnScratch* scratch, ThreadPool* pool);

// y[t, h, :] = o[t, h, :] / sqrt(mean(o[t, h, :]²) + eps) * weight ⊙ SiLU(z[t, h, :]) for
// rows x heads vectors of dim (the GDN output norm: plain weight [dim], shared by heads).
// The mean is a double sum in index order (as RmsNorm's scalar path).
void GatedRmsNorm(const float* o, const float* z, const float* weight, int64_t rows, int64_t heads,
                  int64_t dim, float eps, float* y, ThreadPool* pool);

}  // namespace tessera::kernels::cpu
