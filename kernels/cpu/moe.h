// CPU mixture-of-experts kernels: top-k routing and the grouped expert SwiGLU.
//
// Batch-invariant like every op in ops.h: a token's routing and its expert
// outputs depend only on its own row, never on which other tokens are in the
// call or which experts they chose.
#pragma once

#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "common/thread_pool.h"

namespace tessera::kernels::cpu {

// How MoeRoute scores the experts of a group (DeepSeekMoE's grouped top-k).
enum class MoeGroupScore { kNone, kMax, kTop2Sum };

struct MoeRouteArgs {
  int64_t num_experts = 0, top_k = 0;
  bool sigmoid = false;  // p = sigmoid(logit) per expert instead of the softmax over all
  MoeGroupScore groups = MoeGroupScore::kNone;
  int64_t n_group = 1, topk_group = 1;  // groups: num_experts / n_group consecutive ids
  bool renormalize = false;
  const float* selection_bias = nullptr;  // [num_experts] or null: s = p + bias chooses only
};

// Per token t, all in f32: p = softmax(logits[t, :]) (max subtracted, sum in expert
// order) or sigmoid(logits[t, e]); s = p (+ selection_bias); with groups, each group
// is scored by its max s or the sum of its two largest s, and every expert outside
// the best topk_group groups gets s = -inf; ids = the top_k of s in descending
// order; weights = p[ids] (never the biased s), with renormalize divided by (their
// sum in slot order + 1e-20). Every top-k breaks ties to the lower index (group or
// expert); NaN never wins. The caller guarantees top_k <= topk_group * group size.
void MoeRoute(const float* logits, int64_t tokens, const MoeRouteArgs& args, int32_t* ids, float* weights);

// The plain softmax routing of MoeRoute above (Mixtral, Qwen-MoE).
void MoeRoute(const float* logits, int64_t tokens, int64_t num_experts, int64_t top_k, bool renormalize,
              int32_t* ids, float* weights);

// Per token t: the top_k logits (ties to the lower expert id), in descending
// order, to ids [tokens, top_k]; weights = their softmax over those k only
// (max subtracted, exp and sum in slot order), as gpt-oss routes.
void MoeRouteSoftmaxTopK(const float* logits, int64_t tokens, int64_t num_experts, int64_t top_k, int32_t* ids,
                         float* weights);

// counts[e] += number of entries of ids[0..n) equal to e (ids in [0, num_experts)).
void MoeCountExperts(const int32_t* ids, int64_t n, int64_t num_experts, int64_t* counts);

// out[r, :] += sigmoid(gate_logits[r]) * shared[r, :]   (rows x dim).
void SigmoidGateAdd(float* out, const float* shared, const float* gate_logits, int64_t rows, int64_t dim,
                    ThreadPool* pool);

// out[i] += x[i], i < n. Elementwise: any split gives the same values.
void AddTo(float* out, const float* x, int64_t n, ThreadPool* pool);

// gpt-oss's clamped SwiGLU: per row r and i < inter, g = min(gate_up[r, i], limit),
// u = clamp(gate_up[r, inter + i], -limit, limit),
// out[r, i] = (u + 1) * (g * (1 / (1 + exp(-alpha g)))), in that order (libm exp; rows independent).
void SwigluOaiMul(const float* gate_up, int64_t rows, int64_t inter, float alpha, float limit, float* out,
                  ThreadPool* pool);

struct MoeExpertsArgs {
  const float* x = nullptr;  // [tokens, hidden]
  int64_t tokens = 0, hidden = 0, inter = 0, top_k = 0, num_experts = 0;
  const int32_t* topk_ids = nullptr;     // [tokens, top_k], each in [0, num_experts)
  const float* topk_weights = nullptr;   // [tokens, top_k]
  // Of each projection, shared by every expert (any type Linear takes); they may
  // differ from each other, as llama-quantize's recipes give ffn_down more bits.
  DType gate_dtype = DType::kF32, up_dtype = DType::kF32, down_dtype = DType::kF32;
  const void* const* gate = nullptr;     // per expert [inter, hidden]
  const void* const* up = nullptr;       // per expert [inter, hidden]
  const void* const* down = nullptr;     // per expert [hidden, inter]
  // Optional per expert f32 biases [inter] / [inter] / [hidden]: null arrays mean none.
  const float* const* gate_bias = nullptr;
  const float* const* up_bias = nullptr;
  const float* const* down_bias = nullptr;
  // act(g, u) = silu(g) * u, or SwigluOaiMul's with swiglu_oai.
  bool swiglu_oai = false;
  float swiglu_alpha = 0.0f, swiglu_limit = 0.0f;
  float* out = nullptr;                  // [tokens, hidden], overwritten
};

// Grows with the largest call; reuse one per caller to avoid reallocating.
struct MoeScratch {
  std::vector<float> xg, gate_up, act, y;
  std::vector<int32_t> offsets, order, pos;
};

// out[t, :] = sum over j = 0..top_k-1, in that order, of
//   w[t, j] * (down_e(act(gate_e x[t] + bg_e, up_e x[t] + bu_e)) + bd_e),  e = ids[t, j]
// (biases inside Linear, the down bias before the weight, so expert parallelism,
// which combines unweighted y rows, keeps the same sums).
// Tokens are grouped by expert, so each chosen expert's matrices stream from
// memory once per call for all its tokens; the per-expert products run as
// Linear (ops.h) on column tiles spread over the pool, so both threads work
// even when one token activates only k experts. Linear's per-row results do not
// depend on the number of rows or the column split, and each token's sum runs
// in slot order, so the result is batch-invariant. Aborts on an id out of range.
void MoeExperts(const MoeExpertsArgs& args, MoeScratch* scratch, ThreadPool* pool);

// The combine step of MoeExperts, alone: out[t, :] = sum over j in slot order of
// topk_weights[t, j] * y[pos[t * top_k + j], :] (first term assigned, the rest
// added). Expert parallelism (engine/parallel/shard) computes y on the ranks that
// hold the experts and combines here, so its sums are MoeExperts' bit for bit.
// pool may be null (serial); rows are independent either way.
void MoeCombine(const float* y, const int32_t* pos, const float* topk_weights, int64_t tokens, int64_t top_k,
                int64_t h, float* out, ThreadPool* pool);

}  // namespace tessera::kernels::cpu
