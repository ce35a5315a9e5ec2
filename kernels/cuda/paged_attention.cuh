// Causal attention over the paged KV cache, for decode and (chunked) prefill.
//
// Semantics are those of kernels::cpu::PagedAttention: query token t (position
// p = positions[t], sequence token_to_seq[t]) attends to keys at positions
// [max(0, p - sliding_window + 1), p] of its sequence, read through its block
// table; q head h reads kv head h / (q_heads / kv_heads); softmax(scale * q.k) . v
// (with softcap > 0 each score s becomes softcap * tanh(s / softcap) first)
// in f32 with the running max subtracted. Tokens with p < 0 (graph padding) give zeros.
//
// Decode: one CTA per (token, kv head) handles all q heads of the group (GQA: K/V
// are read once per group). Keys are split into fixed chunks of kSplitKeys; each
// chunk yields a partial (max, sum, out) and a second kernel combines them in
// chunk order. Chunk size does not depend on the batch, so results are
// batch-invariant. Works for any batch (decode tokens, prefill tokens, mixes).
// Prefill: tiles of consecutive query tokens of one sequence (tile list built on the
// host) share K/V loads through shared memory, with an online softmax. Faster for
// long prompts; its reduction order differs from Decode's, so the deterministic
// mode uses Decode for every token.
#pragma once

#include <cstdint>

#include "kernels/cuda/types.cuh"

namespace tessera::kernels::cuda {

inline constexpr int64_t kSplitKeys = 256;      // keys per split-K chunk (decode)
inline constexpr int64_t kPrefillTileQ = 16;    // query tokens per prefill tile

struct PagedAttentionArgs {
  const float* q = nullptr;  // [tokens, q_heads, head_dim], row stride q_stride floats
  int64_t q_stride = 0;
  const void* k_cache = nullptr;  // [num_blocks, block_size, kv_heads, head_dim]
  const void* v_cache = nullptr;
  ElemType cache_type = ElemType::kBF16;
  int64_t num_tokens = 0;
  int64_t num_q_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // <= 256, a multiple of 32
  int64_t block_size = 0;
  const int32_t* positions = nullptr;     // [tokens], device
  const int32_t* token_to_seq = nullptr;  // [tokens], device
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq], device
  int64_t max_blocks_per_seq = 0;
  int64_t sliding_window = 0;  // <= 0: full causal
  float scale = 1.0f;
  float softcap = 0.0f;  // > 0: scores s = scale * q.k become softcap * tanh(s / softcap)
  float* out = nullptr;  // [tokens, q_heads, head_dim] dense
  // Host-known bound on every token's number of keys (max position + 1); sets the
  // split-K grid. Chunks past a token's own context exit at once (CUDA graphs
  // capture with the bound of the largest context they will replay).
  int64_t max_context = 0;
  void* workspace = nullptr;  // device scratch of PagedAttentionWorkspaceBytes()
  int64_t workspace_bytes = 0;
};

// Scratch the decode kernel needs for its split-K partials.
int64_t PagedAttentionWorkspaceBytes(int64_t num_tokens, int64_t num_q_heads, int64_t head_dim,
                                     int64_t max_context);

cudaError_t PagedAttentionDecode(const PagedAttentionArgs& args, cudaStream_t stream);

// One tile: query tokens [first_token, first_token + num_tokens) of one sequence,
// num_tokens <= kPrefillTileQ.
struct PrefillTile {
  int32_t first_token = 0;
  int32_t num_tokens = 0;
};
// tiles: device array of num_tiles tiles covering every query token once.
cudaError_t PagedAttentionPrefill(const PagedAttentionArgs& args, const PrefillTile* tiles,
                                  int64_t num_tiles, cudaStream_t stream);

}  // namespace tessera::kernels::cuda
