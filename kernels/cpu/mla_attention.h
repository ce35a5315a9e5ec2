// Multi-head latent attention (DeepSeek-V2/V3) on a paged latent cache, in the
// weight-absorbed form: the queries move into the latent space and every head
// attends to the same cached rows (MQA over the latent), so the cache holds one row of
// kv_lora_rank + rope_dim values per token instead of K and V per head.
//
// Batch-invariant like ops.h: each (token, head) item reads only its own query row
// and its sequence's cache rows, reduces in position order, and the per-head
// projections are Linear calls whose rows do not depend on each other.
#pragma once

#include <cstdint>

#include "common/dtype.h"
#include "common/thread_pool.h"

namespace tessera::kernels::cpu {

// Interleaved rotary embedding (GPT-J / DeepSeek pairs), in place: for i < rot_dim/2,
// with (x0, x1) = (x[2i], x[2i+1]) and c, s = cos_sin row pos: cos[i], sin[i],
//   x[2i] = x0*c - x1*s;  x[2i+1] = x1*c + x0*s.
// x: [tokens, heads, head_dim] (row stride x_stride); the rot_dim dims rotated start at
// `offset` within each head. cos_sin rows as kernels::cpu::Rope reads them.
void RopeInterleaved(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t offset,
                     int64_t x_stride, int64_t rot_dim, const int32_t* positions, const float* cos_sin);

struct MlaAttentionArgs {
  float* q = nullptr;       // [tokens, heads, nope + rope]; its rope part is rotated in place
  float* latent = nullptr;  // [tokens, r + rope] = [c | k_rope]; k_rope rotated in place
  float* cache = nullptr;   // [num_blocks, block_size, r + rope] f32
  int64_t num_tokens = 0;
  int64_t num_heads = 0;
  int64_t r = 0;     // kv_lora_rank
  int64_t nope = 0;  // qk_nope_head_dim
  int64_t rope = 0;  // qk_rope_head_dim
  int64_t v_dim = 0;
  // Per head: k_b [r, nope] and v_b [v_dim, r] of type w_type (f32/f16/bf16 or a
  // quantized type Linear reads).
  const void* const* k_b = nullptr;
  const void* const* v_b = nullptr;
  DType k_b_type = DType::kF32, v_b_type = DType::kF32;
  const float* cos_sin = nullptr;
  const int32_t* positions = nullptr;
  const int64_t* slot_mapping = nullptr;  // slot < 0: not written
  const int32_t* token_to_seq = nullptr;
  const int32_t* block_tables = nullptr;
  int64_t max_blocks_per_seq = 0;
  int64_t block_size = 0;
  float scale = 1.0f;
  float* q_nope = nullptr;  // scratch [heads, tokens, nope]
  float* q_hat = nullptr;   // scratch [tokens, heads, r + rope]
  float* o_hat = nullptr;   // scratch [heads, tokens, r]
  float* out = nullptr;     // [tokens, heads * v_dim]
};

// Rope, cache write, absorption, causal softmax over the latent rows (f32, max
// subtracted, summed in position order), expansion by v_b. A token with position < 0
// gets zeros. Cost per token: heads * (r*nope + keys*(2r + rope) + v_dim*r) FMAs.
void MlaAttention(const MlaAttentionArgs& a, ThreadPool* pool);

}  // namespace tessera::kernels::cpu
