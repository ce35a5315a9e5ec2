#include "engine/gguf_deepseek.h"

#include <cstring>

namespace tessera {
namespace {

using json = nlohmann::json;

std::string Dims(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// A key that must lie in [lo, hi]; def when absent (nullopt: required).
StatusOr<int64_t> Bounded(const GgufMeta& m, const std::string& key, int64_t lo, int64_t hi,
                          std::optional<int64_t> def = std::nullopt) {
  ASSIGN_OR_RETURN(int64_t v, m.Int(key, def));
  if (v < lo || v > hi) {
    return InvalidArgument(m.label() + ": metadata '" + key + "' must be in [" + std::to_string(lo) + ", " +
                           std::to_string(hi) + "], got " + std::to_string(v));
  }
  return v;
}

Status MoeFields(const GgufContents& g, const GgufMeta& m, json* c) {
  const std::string p = "deepseek2.";
  constexpr int64_t kBig = int64_t{1} << 24;
  ASSIGN_OR_RETURN(int64_t experts, Bounded(m, p + "expert_count", 0, 1 << 16, 0));
  if (experts == 0) return Status::Ok();  // a dense model
  ASSIGN_OR_RETURN(int64_t used, Bounded(m, p + "expert_used_count", 1, experts));
  ASSIGN_OR_RETURN(int64_t inter, Bounded(m, p + "expert_feed_forward_length", 1, kBig));
  ASSIGN_OR_RETURN(int64_t shared, Bounded(m, p + "expert_shared_count", 0, 1 << 10, 0));
  ASSIGN_OR_RETURN(int64_t dense, Bounded(m, p + "leading_dense_block_count", 0, kBig, 0));
  ASSIGN_OR_RETURN(double scale, m.Num(p + "expert_weights_scale", 1.0));
  ASSIGN_OR_RETURN(bool norm, m.Bool(p + "expert_weights_norm", false));
  // llama.cpp: 1 softmax, 2 sigmoid; absent (older V2 files): softmax.
  ASSIGN_OR_RETURN(int64_t gating, m.Int(p + "expert_gating_func", 1));
  if (gating != 1 && gating != 2) {
    return Unimplemented(m.label() + ": metadata '" + p + "expert_gating_func' value " + std::to_string(gating) +
                         " is not supported (1 softmax, 2 sigmoid)");
  }
  ASSIGN_OR_RETURN(int64_t groups, Bounded(m, p + "expert_group_count", 1, experts, 1));
  ASSIGN_OR_RETURN(int64_t groups_used, Bounded(m, p + "expert_group_used_count", 1, groups, 1));
  // GGUF has no topk_method: the correction bias is noaux_tc's (V3), groups without it
  // V2's group_limited_greedy.
  const bool bias = g.FindTensor("blk." + std::to_string(dense) + ".exp_probs_b.bias") != nullptr;
  const bool sigmoid = gating == 2;
  (*c)["architectures"] = {sigmoid ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"};
  (*c)["n_routed_experts"] = experts;
  (*c)["num_experts_per_tok"] = used;
  (*c)["moe_intermediate_size"] = inter;
  (*c)["n_shared_experts"] = shared;
  (*c)["first_k_dense_replace"] = dense;
  (*c)["moe_layer_freq"] = 1;
  (*c)["routed_scaling_factor"] = scale;
  (*c)["norm_topk_prob"] = norm;
  (*c)["scoring_func"] = sigmoid ? "sigmoid" : "softmax";
  (*c)["topk_method"] = bias ? "noaux_tc" : groups > 1 ? "group_limited_greedy" : "greedy";
  (*c)["n_group"] = groups;
  (*c)["topk_group"] = groups_used;
  return Status::Ok();
}

}  // namespace

Status GgufDeepseekConfig(const GgufContents& g, const GgufMeta& m, json* c) {
  const std::string p = "deepseek2.";
  constexpr int64_t kBig = int64_t{1} << 24;
  ASSIGN_OR_RETURN(int64_t blocks, Bounded(m, p + "block_count", 1, 4096));
  ASSIGN_OR_RETURN(int64_t nextn, Bounded(m, p + "nextn_predict_layers", 0, blocks - 1, 0));
  (*c)["num_hidden_layers"] = blocks - nextn;
  if (nextn > 0) (*c)["num_nextn_predict_layers"] = nextn;
  (*c)["architectures"] = {"DeepseekV2ForCausalLM"};
  ASSIGN_OR_RETURN(int64_t q_lora, Bounded(m, p + "attention.q_lora_rank", 0, kBig, 0));
  ASSIGN_OR_RETURN(int64_t kv_lora, Bounded(m, p + "attention.kv_lora_rank", 1, kBig));
  ASSIGN_OR_RETURN(int64_t rope, Bounded(m, p + "rope.dimension_count", 2, kBig));
  // Split kv_b files give the per-head sizes in *_mla keys (key/value_length then describe
  // the latent row); legacy ones in key/value_length.
  ASSIGN_OR_RETURN(int64_t k_mla, Bounded(m, p + "attention.key_length_mla", 0, kBig, 0));
  const std::string k_key = k_mla > 0 ? "attention.key_length_mla" : "attention.key_length";
  const std::string v_key = k_mla > 0 ? "attention.value_length_mla" : "attention.value_length";
  ASSIGN_OR_RETURN(int64_t k_head, Bounded(m, p + k_key, rope + 1, kBig));
  ASSIGN_OR_RETURN(int64_t v_head, Bounded(m, p + v_key, 1, kBig));
  c->erase("head_dim");
  (*c)["q_lora_rank"] = q_lora > 0 ? json(q_lora) : json(nullptr);
  (*c)["kv_lora_rank"] = kv_lora;
  (*c)["qk_nope_head_dim"] = k_head - rope;
  (*c)["qk_rope_head_dim"] = rope;
  (*c)["v_head_dim"] = v_head;
  (*c)["attention_bias"] = false;
  RETURN_IF_ERROR(MoeFields(g, m, c));
  // YaRN: the converter stores 0.1 * mscale_all_dim (and no mscale: DeepSeek's are equal).
  if (c->contains("rope_scaling") && (*c)["rope_scaling"].is_object()) {
    ASSIGN_OR_RETURN(double mul, m.Num(p + "rope.scaling.yarn_log_multiplier", 0.0));
    if (mul < 0) return InvalidArgument(m.label() + ": metadata '" + p + "rope.scaling.yarn_log_multiplier' must be >= 0");
    if (mul > 0) {
      (*c)["rope_scaling"]["mscale"] = mul / 0.1;
      (*c)["rope_scaling"]["mscale_all_dim"] = mul / 0.1;
    }
  }
  return Status::Ok();
}

void AppendDeepseekMetadata(const ModelConfig& c, std::vector<std::pair<std::string, GgufValue>>* md) {
  const std::string p = "deepseek2.";
  auto u32 = [](int64_t v) { return GgufValue::U32(static_cast<uint32_t>(v)); };
  const MlaConfig& a = c.mla;
  md->emplace_back(p + "attention.key_length", u32(a.kv_lora_rank + a.qk_rope_head_dim));
  md->emplace_back(p + "attention.value_length", u32(a.kv_lora_rank));
  md->emplace_back(p + "attention.key_length_mla", u32(a.qk_nope_head_dim + a.qk_rope_head_dim));
  md->emplace_back(p + "attention.value_length_mla", u32(a.v_head_dim));
  if (a.q_lora_rank > 0) md->emplace_back(p + "attention.q_lora_rank", u32(a.q_lora_rank));
  md->emplace_back(p + "attention.kv_lora_rank", u32(a.kv_lora_rank));
  md->emplace_back(p + "rope.dimension_count", u32(a.qk_rope_head_dim));
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScalingType::kYarn && s.mscale_all_dim > 0) {
    md->emplace_back(p + "rope.scaling.yarn_log_multiplier", GgufValue::F32(static_cast<float>(0.1 * s.mscale_all_dim)));
  }
  if (!c.is_moe()) return;
  const MoeConfig& e = c.moe;
  int64_t dense = 0;
  while (dense < c.num_layers && !c.layer_moe[dense]) ++dense;
  md->emplace_back(p + "leading_dense_block_count", u32(dense));
  md->emplace_back(p + "expert_count", u32(e.num_experts));
  md->emplace_back(p + "expert_used_count", u32(e.top_k));
  md->emplace_back(p + "expert_feed_forward_length", u32(e.expert_inter));
  md->emplace_back(p + "expert_shared_count", u32(e.shared_inter / e.expert_inter));
  md->emplace_back(p + "expert_weights_scale", GgufValue::F32(static_cast<float>(e.routed_scaling_factor)));
  md->emplace_back(p + "expert_weights_norm", GgufValue::Bool(e.norm_topk_prob));
  md->emplace_back(p + "expert_gating_func", u32(e.scoring == MoeScoring::kSigmoid ? 2 : 1));
  md->emplace_back(p + "expert_group_count", u32(e.n_group));
  md->emplace_back(p + "expert_group_used_count", u32(e.topk_group));
}

Status GgufDeepseekKvB(const GgufContents& g, const ModelConfig& c, int64_t layer, const std::string& label,
                       std::vector<uint8_t>* out, DType* dtype) {
  const std::string b = "blk." + std::to_string(layer) + ".";
  const GgufTensor* kb = g.FindTensor(b + "attn_k_b.weight");
  const GgufTensor* vb = g.FindTensor(b + "attn_v_b.weight");
  if (kb == nullptr || vb == nullptr) {
    return NotFound(label + ": missing tensor '" + b + (kb ? "attn_v_b" : "attn_k_b") +
                    ".weight' (or the legacy '" + b + "attn_kv_b.weight')");
  }
  const MlaConfig& a = c.mla;
  const int64_t H = c.num_q_heads, r = a.kv_lora_rank, nope = a.qk_nope_head_dim, v = a.v_head_dim;
  for (const auto& [t, want] : {std::pair{kb, std::vector<int64_t>{H, r, nope}}, {vb, {H, v, r}}}) {
    if (t->dtype != DType::kF32 && t->dtype != DType::kF16 && t->dtype != DType::kBF16) {
      return Unimplemented(label + ": tensor '" + t->name + "' is " + std::string(GgmlTypeName(t->ggml_type)) +
                           "; attn_k_b / attn_v_b must be F32, F16 or BF16 (rejoined into kv_b_proj at load)");
    }
    if (t->shape() != want) {
      return InvalidArgument(label + ": tensor '" + t->name + "' has shape " + Dims(t->shape()) + ", expected " +
                             Dims(want));
    }
  }
  if (kb->dtype != vb->dtype) {
    return InvalidArgument(label + ": tensors '" + kb->name + "' and '" + vb->name + "' differ in type");
  }
  const auto es = static_cast<int64_t>(DTypeSize(kb->dtype));
  out->assign(static_cast<size_t>(H * (nope + v) * r * es), 0);
  for (int64_t h = 0; h < H; ++h) {
    uint8_t* head = out->data() + h * (nope + v) * r * es;
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < nope; ++j) {
        std::memcpy(head + (j * r + i) * es, kb->data + ((h * r + i) * nope + j) * es, es);
      }
    }
    std::memcpy(head + nope * r * es, vb->data + h * v * r * es, v * r * es);
  }
  *dtype = kb->dtype;
  return Status::Ok();
}

void SplitDeepseekKvB(const uint8_t* kv_b, const ModelConfig& c, int64_t es, uint8_t* k_b, uint8_t* v_b) {
  const MlaConfig& a = c.mla;
  const int64_t H = c.num_q_heads, r = a.kv_lora_rank, nope = a.qk_nope_head_dim, v = a.v_head_dim;
  for (int64_t h = 0; h < H; ++h) {
    const uint8_t* head = kv_b + h * (nope + v) * r * es;
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < nope; ++j) {
        std::memcpy(k_b + ((h * r + i) * nope + j) * es, head + (j * r + i) * es, es);
      }
    }
    std::memcpy(v_b + h * v * r * es, head + nope * r * es, v * r * es);
  }
}

}  // namespace tessera
