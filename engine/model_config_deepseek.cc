// DeepSeek-V2 / V3 config fields (HF DeepseekV2Config / DeepseekV3Config names):
// multi-head latent attention, YaRN's softmax mscale, and DeepSeekMoE routing. What
// the engine does not run yet is refused here, naming the field, never ignored.
#include <cmath>


#include "engine/config_fields.h"
#include "common/log.h"

namespace tessera::config_internal {
namespace {

double YarnMscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

Status ParseMla(const FieldReader& r, const std::string& label, ModelConfig* c) {
  MlaConfig& m = c->mla;
  RETURN_IF_ERROR(r.Int("q_lora_rank", &m.q_lora_rank, false));
  RETURN_IF_ERROR(r.Int("kv_lora_rank", &m.kv_lora_rank, true));
  RETURN_IF_ERROR(r.Int("qk_nope_head_dim", &m.qk_nope_head_dim, true));
  RETURN_IF_ERROR(r.Int("qk_rope_head_dim", &m.qk_rope_head_dim, true, 2));
  RETURN_IF_ERROR(r.Int("v_head_dim", &m.v_head_dim, true));
  if (m.qk_rope_head_dim % 2 != 0) {
    return InvalidArgument(label + ": field 'qk_rope_head_dim' must be even for rotary embeddings, got " +
                           std::to_string(m.qk_rope_head_dim));
  }
  bool interleave = true;
  RETURN_IF_ERROR(r.Bool("rope_interleave", &interleave));
  if (!interleave) {
    return Unimplemented(label + ": field 'rope_interleave' false is not supported (DeepSeek rotates "
                                 "interleaved pairs)");
  }
  bool bias = false;
  RETURN_IF_ERROR(r.Bool("attention_bias", &bias));
  if (bias) return Unimplemented(label + ": field 'attention_bias' true is not supported for DeepSeek");
  c->attention = AttentionKind::kMla;
  c->rope_style = RopeStyle::kInterleaved;
  c->head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;
  c->rotary_dim = m.qk_rope_head_dim;
  // The latent is shared by all heads: one "KV head" (the cache layout ignores it).
  c->num_kv_heads = 1;
  // softmax scale = qk_head_dim^-1/2, times mscale(factor, mscale_all_dim)^2 under YaRN
  // (the cos/sin side carries mscale / mscale_all_dim: engine/rope.cc).
  double scale = 1.0 / std::sqrt(static_cast<double>(c->head_dim));
  const RopeScaling& s = c->rope_scaling;
  if (s.type == RopeScalingType::kYarn && s.mscale_all_dim > 0) {
    const double ms = YarnMscale(s.factor, s.mscale_all_dim);
    scale *= ms * ms;
  }
  c->attn_scale = scale;
  return Status::Ok();
}

// DeepSeekMoE's routing (scoring_func, topk_method, n_group / topk_group) into MoeConfig,
// refusing groupings the routing cannot run, naming the field.
Status ParseDeepseekRouting(const FieldReader& r, const std::string& label, MoeConfig* m) {
  auto num = [](int64_t v) { return std::to_string(v); };
  std::string scoring = "softmax", topk = "greedy";
  RETURN_IF_ERROR(r.String("scoring_func", &scoring));
  RETURN_IF_ERROR(r.String("topk_method", &topk));
  if (scoring == "softmax") {
    m->scoring = MoeScoring::kSoftmax;
  } else if (scoring == "sigmoid") {
    m->scoring = MoeScoring::kSigmoid;
  } else {
    return Unimplemented(label + ": field 'scoring_func' value '" + scoring +
                         "' is not supported (supported: softmax, sigmoid)");
  }
  if (topk == "greedy") {
    m->topk_method = MoeTopkMethod::kGreedy;
  } else if (topk == "group_limited_greedy") {
    m->topk_method = MoeTopkMethod::kGroupLimitedGreedy;
  } else if (topk == "noaux_tc") {
    m->topk_method = MoeTopkMethod::kNoauxTc;
  } else {
    return Unimplemented(label + ": field 'topk_method' value '" + topk +
                         "' is not supported (supported: greedy, group_limited_greedy, noaux_tc)");
  }
  // noaux_tc routes with mlp.gate.e_score_correction_bias (vLLM reads it for that
  // method only; the HF checkpoints of the other methods have none).
  m->score_correction_bias = m->topk_method == MoeTopkMethod::kNoauxTc;
  if (m->topk_method == MoeTopkMethod::kGreedy) return Status::Ok();  // n_group / topk_group unused
  RETURN_IF_ERROR(r.Int("n_group", &m->n_group, true));
  RETURN_IF_ERROR(r.Int("topk_group", &m->topk_group, true));
  if (m->num_experts % m->n_group != 0) {
    return InvalidArgument(label + ": field 'n_group' (" + num(m->n_group) + ") must divide 'n_routed_experts' (" +
                           num(m->num_experts) + ")");
  }
  if (m->topk_group > m->n_group) {
    return InvalidArgument(label + ": field 'topk_group' (" + num(m->topk_group) + ") must be <= 'n_group' (" +
                           num(m->n_group) + ")");
  }
  const int64_t group_size = m->num_experts / m->n_group;
  if (m->top_k > m->topk_group * group_size) {
    return InvalidArgument(label + ": field 'num_experts_per_tok' (" + num(m->top_k) +
                           ") exceeds the experts of 'topk_group' groups (" + num(m->topk_group * group_size) + ")");
  }
  if (m->topk_method == MoeTopkMethod::kNoauxTc && group_size < 2) {
    return InvalidArgument(label + ": field 'n_group' (" + num(m->n_group) +
                           ") leaves groups of one expert; noaux_tc scores a group by its two best experts");
  }
  return Status::Ok();
}

// DeepSeekMoE: which layers are MoE, the routing (above), the shared experts (one FFN
// n_shared_experts * moe_intermediate_size wide, added without a gate) and the scaling.
Status ParseDeepseekMoe(const FieldReader& r, const std::string& label, ModelConfig* c) {
  MoeConfig& m = c->moe;
  RETURN_IF_ERROR(r.Int("n_routed_experts", &m.num_experts, false));
  if (m.num_experts == 0) return Status::Ok();  // null: a dense model
  RETURN_IF_ERROR(r.Int("num_experts_per_tok", &m.top_k, true));
  RETURN_IF_ERROR(r.Int("moe_intermediate_size", &m.expert_inter, true));
  if (m.top_k > m.num_experts) {
    return InvalidArgument(label + ": field 'num_experts_per_tok' (" + std::to_string(m.top_k) +
                           ") must be <= 'n_routed_experts' (" + std::to_string(m.num_experts) + ")");
  }
  constexpr int64_t kMaxExperts = 1 << 16;
  if (m.num_experts > kMaxExperts) {
    return InvalidArgument(label + ": field 'n_routed_experts' must be <= " + std::to_string(kMaxExperts));
  }
  int64_t first_dense = 0, freq = 1, shared = 0;
  RETURN_IF_ERROR(r.Int("first_k_dense_replace", &first_dense, false, 0));
  RETURN_IF_ERROR(r.Int("moe_layer_freq", &freq, false));
  RETURN_IF_ERROR(r.Int("n_shared_experts", &shared, false, 0));
  constexpr int64_t kMaxShared = 1 << 10;
  if (shared > kMaxShared) {
    return InvalidArgument(label + ": field 'n_shared_experts' must be <= " + std::to_string(kMaxShared));
  }
  m.shared_inter = shared * m.expert_inter;
  m.shared_gate = false;
  m.norm_topk_prob = false;  // DeepseekV2Config default
  RETURN_IF_ERROR(r.Bool("norm_topk_prob", &m.norm_topk_prob));
  RETURN_IF_ERROR(r.Double("routed_scaling_factor", &m.routed_scaling_factor, false, 0.0));
  RETURN_IF_ERROR(ParseDeepseekRouting(r, label, &m));
  for (int64_t i = 0; i < c->num_layers; ++i) c->layer_moe[i] = i >= first_dense && i % freq == 0;
  if (c->num_moe_layers() == 0) {
    return InvalidArgument(label + ": fields 'first_k_dense_replace' and 'moe_layer_freq' leave no MoE layer");
  }
  return Status::Ok();
}

}  // namespace

Status ParseDeepseek(const json& root, const std::string& label, ModelConfig* c) {
  auto q = root.find("quantization_config");
  if (q != root.end() && !q->is_null()) {
    std::string method = q->is_object() && q->contains("quant_method") ? (*q)["quant_method"].dump() : q->dump();
    return Unimplemented(label + ": field 'quantization_config.quant_method' " + method +
                         " is not supported (fp8 block-quantized checkpoints: use a bf16 conversion or a GGUF)");
  }
  FieldReader r(root, label);
  RETURN_IF_ERROR(ParseMla(r, label, c));
  RETURN_IF_ERROR(ParseDeepseekMoe(r, label, c));
  // DeepSeek-V3's multi-token-prediction layers follow the decoder (HF model.layers.L..,
  // GGUF blk.L.. with block_count counting them): known, and not loaded.
  int64_t nextn = 0;
  RETURN_IF_ERROR(r.Int("num_nextn_predict_layers", &nextn, false, 0));
  if (nextn > 0) {
    LogInfo("{}: skipping {} multi-token-prediction layer(s) (num_nextn_predict_layers; layers {}..{}): "
            "the deepseek_mtp speculative proposer is not built yet",
            label, nextn, c->num_layers, c->num_layers + nextn - 1);
  }
  return Status::Ok();
}

}  // namespace tessera::config_internal
