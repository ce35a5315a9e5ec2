// DeepSeek-V2 / V3 config fields (HF DeepseekV2Config / DeepseekV3Config names):
// multi-head latent attention, YaRN's softmax mscale, and DeepSeekMoE routing. What
// the engine does not run yet is refused here, naming the field, never ignored.
#include <cmath>

#include "engine/config_fields.h"

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

// DeepSeekMoE: which layers are MoE, and the routing variants the MoE block runs
// (softmax over all experts, greedy top-k, optional renormalisation, scaling).
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
  if (shared > 0) {
    return Unimplemented(label + ": field 'n_shared_experts' (" + std::to_string(shared) +
                         ") is not supported yet: the MoE block adds only sigmoid-gated shared experts");
  }
  m.norm_topk_prob = false;  // DeepseekV2Config default
  RETURN_IF_ERROR(r.Bool("norm_topk_prob", &m.norm_topk_prob));
  RETURN_IF_ERROR(r.Double("routed_scaling_factor", &m.routed_scaling_factor, false, 0.0));
  std::string scoring = "softmax", topk = "greedy";
  RETURN_IF_ERROR(r.String("scoring_func", &scoring));
  RETURN_IF_ERROR(r.String("topk_method", &topk));
  if (scoring != "softmax") {
    return Unimplemented(label + ": field 'scoring_func' value '" + scoring + "' is not supported (supported: softmax)");
  }
  if (topk != "greedy") {
    return Unimplemented(label + ": field 'topk_method' value '" + topk + "' is not supported (supported: greedy)");
  }
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
  return ParseDeepseekMoe(r, label, c);
}

}  // namespace tessera::config_internal
