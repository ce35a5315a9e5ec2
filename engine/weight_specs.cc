#include "engine/weight_specs.h"

namespace tessera {

std::vector<WeightSpec> ExpectedWeights(const ModelConfig& c) {
  const int64_t h = c.hidden_size, d = c.head_dim, inter = c.intermediate_size;
  const int64_t q_out = c.num_q_heads * d, kv_out = c.num_kv_heads * d;
  using R = WeightRole;
  std::vector<WeightSpec> w;
  w.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, R::kEmbed});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto add = [&](const std::string& name, std::vector<int64_t> shape, R role) {
      w.push_back({p + name, std::move(shape), role, i});
    };
    add("input_layernorm.weight", {h}, R::kInputNorm);
    add("self_attn.q_proj.weight", {q_out, h}, R::kQ);
    add("self_attn.k_proj.weight", {kv_out, h}, R::kK);
    add("self_attn.v_proj.weight", {kv_out, h}, R::kV);
    add("self_attn.o_proj.weight", {h, q_out}, R::kO);
    if (c.qkv_bias) {
      add("self_attn.q_proj.bias", {q_out}, R::kQBias);
      add("self_attn.k_proj.bias", {kv_out}, R::kKBias);
      add("self_attn.v_proj.bias", {kv_out}, R::kVBias);
    }
    if (c.o_bias) add("self_attn.o_proj.bias", {h}, R::kOBias);
    if (c.qk_norm) {
      add("self_attn.q_norm.weight", {d}, R::kQNorm);
      add("self_attn.k_norm.weight", {d}, R::kKNorm);
    }
    add("post_attention_layernorm.weight", {h}, R::kPostNorm);
    add("mlp.gate_proj.weight", {inter, h}, R::kGate);
    add("mlp.up_proj.weight", {inter, h}, R::kUp);
    add("mlp.down_proj.weight", {h, inter}, R::kDown);
    if (c.mlp_bias) {
      add("mlp.gate_proj.bias", {inter}, R::kGateBias);
      add("mlp.up_proj.bias", {inter}, R::kUpBias);
      add("mlp.down_proj.bias", {h}, R::kDownBias);
    }
  }
  w.push_back({"model.norm.weight", {h}, R::kFinalNorm});
  if (!c.tie_word_embeddings) w.push_back({"lm_head.weight", {c.vocab_size, h}, R::kLmHead});
  return w;
}

}  // namespace tessera
