// MoeBlock: the mixture-of-experts FFN of Mixtral, Qwen2-MoE, Qwen3-MoE, gpt-oss and DeepSeek
// (docs/architecture.md, "Engine"), run by Model in place of the dense SwiGLU on the layers
// ModelConfig::layer_moe marks:
//
//   logits = router x (+ router bias)        [tokens, E]
//   ids, w = top-k of softmax(logits)        (ties: lower id; renormalised when norm_topk_prob;
//                                             times routed_scaling_factor, DeepSeek)
//            or softmax over the top-k logits (MoeScoring::kSoftmaxTopK, gpt-oss)
//            or DeepSeekMoE's sigmoid scores, group-limited choice and score
//            correction bias (MoeRouteParams; the bias chooses, never weighs)
//   out    = sum_j w_j * expert_{id_j}(x)    grouped by expert, summed per token in slot order;
//            an expert may carry gate/up/down biases and the clamped SwiGLU (MoeConfig)
//   out   += sigmoid(shared_gate . x) * shared_expert(x)      (Qwen2-MoE)
//   out   += shared_expert(x)                                 (a shared expert without a gate)
//
// Every op is per-token (Backend::MoeExperts groups tokens by expert but keeps
// each row's arithmetic independent of the group), so batch invariance holds
// as for dense models. Also counts the tokens routed to each expert.
// Thread safety: like Model, one Forward at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/model_config.h"
#include "engine/moe/expert_load.h"
#include "engine/weight_specs.h"

namespace tessera {
namespace parallel {
class ModelShard;
}

struct MoeLayerWeights {
  WeightView router;  // [num_experts, hidden]
  std::shared_ptr<void> router_bias;  // f32 [num_experts] in backend memory; null without
  std::shared_ptr<void> score_bias;   // f32 [num_experts] e_score_correction_bias; null without
  MoeExpertWeights experts;
  WeightView shared_gate, shared_up, shared_down;  // empty without a shared expert
  WeightView shared_expert_gate;                   // [1, hidden]; empty without the sigmoid gate
};

class MoeBlock {
 public:
  // For a config with is_moe(); fails when the backend has no MoE ops.
  static StatusOr<std::unique_ptr<MoeBlock>> Create(const ModelConfig& config, Backend* backend);

  // Records one uploaded MoE weight (spec.IsMoe()). `file` names its source in errors.
  Status Bind(const WeightSpec& spec, const WeightView& weight, const std::string& file);
  // Records one MoE vector (router or expert bias) converted to f32 in backend
  // memory; the block keeps `data` alive.
  Status BindVector(const WeightSpec& spec, std::shared_ptr<void> data, const std::string& file);
  // Expert parallelism: only the shard's experts are bound, and Forward sends
  // tokens to the other ranks' experts through it. Call before Bind.
  void SetExpertParallel(parallel::ModelShard* shard) { ep_ = shard; }
  // After every spec is bound: all routed experts of a layer share one dtype.
  Status Validate();

  // Grows the per-token buffers to `tokens` rows (backend memory).
  Status EnsureWorkspace(int64_t tokens);
  // out[0..tokens) = MoE FFN of layer `layer` applied to x (both [tokens, hidden]
  // in backend memory); adds the routing to the expert counts. With expert
  // parallelism tokens may be 0 (a rank with no sequences still takes part).
  void Forward(int64_t layer, const float* x, int64_t tokens, float* out);

  // Bytes of one routed expert (gate + up + down, and its biases) as stored on the backend.
  int64_t expert_bytes() const;
  int64_t num_moe_layers() const { return static_cast<int64_t>(moe_layers_.size()); }

  // Expert parallelism with EPLB: installs new expert maps and moves expert
  // weights between ranks (ModelShard::Rebalance); collective, every rank.
  Status Rebalance();

  // Copies the counts from the backend (a device sync on CUDA). Under expert
  // parallelism: the whole group's counts (ModelShard gathers them every step).
  StatusOr<ExpertLoad> ReadExpertLoad() const;
  void ResetExpertLoad();

 private:
  MoeBlock() = default;
  void BuildLocal();  // local_ from the shard's slots
  ModelConfig config_;
  MoeRouteParams route_;        // from config_.moe; Forward adds the layer's score bias
  Backend* backend_ = nullptr;  // not owned
  std::vector<int64_t> moe_index_;      // per layer: index among MoE layers, or -1
  std::vector<int64_t> moe_layers_;     // layer id of each MoE layer
  std::vector<MoeLayerWeights> weights_;  // per MoE layer
  parallel::ModelShard* ep_ = nullptr;    // not owned; null without expert parallelism
  std::vector<MoeExpertWeights> local_;   // per MoE layer: this rank's slots' experts (EP)
  std::shared_ptr<void> counts_;        // int64 [moe layers, num_experts], backend memory
  std::vector<std::shared_ptr<void>> vectors_;  // expert biases' memory (BindVector)
  struct Workspace {
    int64_t capacity = 0;
    std::shared_ptr<void> logits, ids, weights, shared_gate_up, shared_act, shared_out, gate_logit;
  } ws_;
};

}  // namespace tessera
