// The checkpoint tensors a ModelConfig implies: HF names, shapes and roles.
// One table, read by the loader (to bind and validate) and by the synthetic
// checkpoint writer (to generate), so the two never disagree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model_config.h"

namespace tessera {

enum class WeightRole {
  kEmbed, kLmHead, kFinalNorm,
  kInputNorm, kPostNorm, kQNorm, kKNorm,
  kQ, kK, kV, kO, kQBias, kKBias, kVBias, kOBias,
  kGate, kUp, kDown, kGateBias, kUpBias, kDownBias,
  // Sandwich norms (Gemma): RMSNorm of the attention output and of the MLP output,
  // before each residual add (post_attention_layernorm / post_feedforward_layernorm).
  kAttnOutNorm, kFfnOutNorm,
  // Multi-head latent attention (engine/mla/): q_a_proj [q_lora, h], q_a_layernorm
  // [q_lora], q_b_proj [heads * (nope + rope), q_lora] (without q_lora: kQ is q_proj),
  // kv_a_proj_with_mqa [r + rope, h], kv_a_layernorm [r], kv_b_proj [heads * (nope + v), r].
  // Before kRouter: IsMoe() is every role from kRouter on.
  kQA, kQANorm, kQB, kKvA, kKvANorm, kKvB,
  // MoE layers (engine/moe/): router [E, h]; per expert gate/up [inter, h] and
  // down [h, inter]; shared expert gate/up/down; shared expert gate [1, h].
  kRouter, kExpertGate, kExpertUp, kExpertDown,
  kSharedGate, kSharedUp, kSharedDown, kSharedExpertGate,
  // gpt-oss: per query head attention sink logits [heads]; router bias [E]; per expert
  // gate/up bias [inter] and down bias [hidden].
  kSinks, kRouterBias, kExpertGateBias, kExpertUpBias, kExpertDownBias,
  // DeepSeek-V3: the router's score correction bias [E] (selection only, engine/moe/).
  kScoreBias,
};

struct WeightSpec {
  std::string name;
  std::vector<int64_t> shape;
  WeightRole role;
  int64_t layer = -1;  // -1 for model-level tensors
  int64_t expert = -1;  // routed experts: the expert id
  // Fused projections (Phi-3 qkv_proj, gate_up_proj): this matrix is rows
  // [row_offset, row_offset + shape[0]) of the stored tensor `name`, which has
  // stored_rows rows (0: not fused, the tensor is exactly `shape`). Rows of a
  // row-major matrix are contiguous bytes, so a part is a zero-copy view.
  int64_t row_offset = 0;
  int64_t stored_rows = 0;
  // HF experts stacked in one tensor per layer (gpt-oss `mlp.experts.gate_up_proj`):
  // `name` holds every expert, [E, ...]; this expert's rows are row_offset,
  // row_offset + row_step, ... of its [stored_rows, cols] slice (gate and up
  // interleave: step 2). A dense stacked tensor stores each slice transposed
  // ([cols, stored_rows], x @ W); MXFP4 ones are name + "_blocks" / "_scales"
  // (engine/mxfp4_repack.h). Read through a copy, never a view.
  bool stacked = false;
  int64_t row_step = 1;
  std::vector<int64_t> StoredShape() const {
    if (stored_rows == 0) return shape;
    return shape.size() == 1 ? std::vector<int64_t>{stored_rows} : std::vector<int64_t>{stored_rows, shape[1]};
  }
  bool IsNorm() const {
    return role == WeightRole::kFinalNorm || role == WeightRole::kInputNorm ||
           role == WeightRole::kPostNorm || role == WeightRole::kQNorm || role == WeightRole::kKNorm ||
           role == WeightRole::kAttnOutNorm || role == WeightRole::kFfnOutNorm || role == WeightRole::kQANorm ||
           role == WeightRole::kKvANorm;
  }
  // Weights MoeBlock binds (engine/moe/).
  bool IsMoe() const {
    switch (role) {
      case WeightRole::kRouter: case WeightRole::kRouterBias: case WeightRole::kScoreBias:
      case WeightRole::kExpertGate: case WeightRole::kExpertUp: case WeightRole::kExpertDown:
      case WeightRole::kExpertGateBias: case WeightRole::kExpertUpBias: case WeightRole::kExpertDownBias:
      case WeightRole::kSharedGate: case WeightRole::kSharedUp: case WeightRole::kSharedDown:
      case WeightRole::kSharedExpertGate:
        return true;
      default:
        return false;
    }
  }
  bool IsExpert() const { return expert >= 0; }
  bool IsBias() const {
    return role == WeightRole::kQBias || role == WeightRole::kKBias || role == WeightRole::kVBias ||
           role == WeightRole::kOBias || role == WeightRole::kGateBias || role == WeightRole::kUpBias ||
           role == WeightRole::kDownBias || role == WeightRole::kRouterBias || role == WeightRole::kExpertGateBias ||
           role == WeightRole::kExpertUpBias || role == WeightRole::kExpertDownBias ||
           role == WeightRole::kScoreBias;
  }
};

// Every tensor the model reads, in a stable order (lm_head omitted when tied).
std::vector<WeightSpec> ExpectedWeights(const ModelConfig& config);

}  // namespace tessera
