#include "engine/weight_specs.h"

namespace tessera {

namespace {

// gpt-oss: mlp.router.{weight,bias}; the experts stacked per layer, gate and up
// interleaved by rows in gate_up_proj (gate = even rows), each with its bias.
void AddGptOssMoe(const ModelConfig& c, int64_t layer, const std::string& p, std::vector<WeightSpec>* w) {
  using R = WeightRole;
  const int64_t h = c.hidden_size, ei = c.moe.expert_inter, e_n = c.moe.num_experts;
  w->push_back({p + "mlp.router.weight", {e_n, h}, R::kRouter, layer});
  w->push_back({p + "mlp.router.bias", {e_n}, R::kRouterBias, layer});
  const std::string x = p + "mlp.experts.";
  for (int64_t e = 0; e < e_n; ++e) {
    auto part = [&](const std::string& name, std::vector<int64_t> shape, R role, int64_t offset, int64_t stored,
                    int64_t step) {
      WeightSpec s{x + name, std::move(shape), role, layer, e, offset, stored};
      s.stacked = true;
      s.row_step = step;
      w->push_back(std::move(s));
    };
    part("gate_up_proj", {ei, h}, R::kExpertGate, 0, 2 * ei, 2);
    part("gate_up_proj", {ei, h}, R::kExpertUp, 1, 2 * ei, 2);
    part("down_proj", {h, ei}, R::kExpertDown, 0, h, 1);
    part("gate_up_proj_bias", {ei}, R::kExpertGateBias, 0, 2 * ei, 2);
    part("gate_up_proj_bias", {ei}, R::kExpertUpBias, 1, 2 * ei, 2);
    part("down_proj_bias", {h}, R::kExpertDownBias, 0, h, 1);
  }
}

}  // namespace

std::vector<WeightSpec> ExpectedWeights(const ModelConfig& c) {
  const int64_t h = c.hidden_size, d = c.head_dim, inter = c.intermediate_size;
  const int64_t q_out = c.num_q_heads * d, kv_out = c.num_kv_heads * d;
  using R = WeightRole;
  std::vector<WeightSpec> w;
  const std::string& model = c.weight_prefix;  // "model." but for Gemma 3 with a vision tower
  w.push_back({model + "embed_tokens.weight", {c.vocab_size, h}, R::kEmbed});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = model + "layers." + std::to_string(i) + ".";
    auto add = [&](const std::string& name, std::vector<int64_t> shape, R role) {
      w.push_back({p + name, std::move(shape), role, i});
    };
    // Rows [offset, offset + shape[0]) of the fused tensor `name` of `total` rows.
    auto part = [&](const std::string& name, std::vector<int64_t> shape, R role, int64_t offset, int64_t total) {
      w.push_back({p + name, std::move(shape), role, i, -1, offset, total});
    };
    add("input_layernorm.weight", {h}, R::kInputNorm);
    if (c.attention == AttentionKind::kMla) {
      const MlaConfig& m = c.mla;
      if (m.q_lora_rank > 0) {
        add("self_attn.q_a_proj.weight", {m.q_lora_rank, h}, R::kQA);
        add("self_attn.q_a_layernorm.weight", {m.q_lora_rank}, R::kQANorm);
        add("self_attn.q_b_proj.weight", {q_out, m.q_lora_rank}, R::kQB);
      } else {
        add("self_attn.q_proj.weight", {q_out, h}, R::kQ);
      }
      add("self_attn.kv_a_proj_with_mqa.weight", {m.kv_lora_rank + m.qk_rope_head_dim, h}, R::kKvA);
      add("self_attn.kv_a_layernorm.weight", {m.kv_lora_rank}, R::kKvANorm);
      add("self_attn.kv_b_proj.weight", {c.num_q_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank},
          R::kKvB);
      add("self_attn.o_proj.weight", {h, c.num_q_heads * m.v_head_dim}, R::kO);
    } else if (c.fused_qkv) {
      const int64_t rows = q_out + 2 * kv_out;
      part("self_attn.qkv_proj.weight", {q_out, h}, R::kQ, 0, rows);
      part("self_attn.qkv_proj.weight", {kv_out, h}, R::kK, q_out, rows);
      part("self_attn.qkv_proj.weight", {kv_out, h}, R::kV, q_out + kv_out, rows);
    } else {
      add("self_attn.q_proj.weight", {q_out, h}, R::kQ);
      add("self_attn.k_proj.weight", {kv_out, h}, R::kK);
      add("self_attn.v_proj.weight", {kv_out, h}, R::kV);
    }
    if (c.attention == AttentionKind::kMha) add("self_attn.o_proj.weight", {h, q_out}, R::kO);
    if (c.qkv_bias) {
      add("self_attn.q_proj.bias", {q_out}, R::kQBias);
      add("self_attn.k_proj.bias", {kv_out}, R::kKBias);
      add("self_attn.v_proj.bias", {kv_out}, R::kVBias);
    }
    if (c.o_bias) add("self_attn.o_proj.bias", {h}, R::kOBias);
    if (c.attn_sinks) add("self_attn.sinks", {c.num_q_heads}, R::kSinks);
    if (c.qk_norm) {
      add("self_attn.q_norm.weight", {d}, R::kQNorm);
      add("self_attn.k_norm.weight", {d}, R::kKNorm);
    }
    if (c.sandwich_norms) {  // Gemma: the MLP's input norm is pre_feedforward_layernorm
      add("post_attention_layernorm.weight", {h}, R::kAttnOutNorm);
      add("pre_feedforward_layernorm.weight", {h}, R::kPostNorm);
      add("post_feedforward_layernorm.weight", {h}, R::kFfnOutNorm);
    } else {
      add("post_attention_layernorm.weight", {h}, R::kPostNorm);
    }
    if (c.layer_moe[i] && c.architecture == "GptOssForCausalLM") {
      AddGptOssMoe(c, i, p, &w);
      continue;
    }
    if (c.layer_moe[i]) {
      const MoeConfig& m = c.moe;
      const int64_t ei = m.expert_inter;
      // Mixtral: block_sparse_moe.{gate, experts.E.w1 (gate) / w3 (up) / w2 (down)}.
      const bool mixtral = c.architecture == "MixtralForCausalLM";
      const std::string moe = mixtral ? "block_sparse_moe." : "mlp.";
      add(moe + "gate.weight", {m.num_experts, h}, R::kRouter);
      if (m.score_correction_bias) add("mlp.gate.e_score_correction_bias", {m.num_experts}, R::kScoreBias);
      for (int64_t e = 0; e < m.num_experts; ++e) {
        const std::string ep = p + moe + "experts." + std::to_string(e) + ".";
        auto expert = [&](const char* name, std::vector<int64_t> shape, R role) {
          w.push_back({ep + name, std::move(shape), role, i, e});
        };
        expert(mixtral ? "w1.weight" : "gate_proj.weight", {ei, h}, R::kExpertGate);
        expert(mixtral ? "w3.weight" : "up_proj.weight", {ei, h}, R::kExpertUp);
        expert(mixtral ? "w2.weight" : "down_proj.weight", {h, ei}, R::kExpertDown);
      }
      if (m.shared_inter > 0) {
        // Qwen2-MoE: mlp.shared_expert (one, gated); DeepSeek: mlp.shared_experts
        // (n_shared_experts of them fused into one FFN, added ungated).
        const std::string sh = m.shared_gate ? "mlp.shared_expert." : "mlp.shared_experts.";
        add(sh + "gate_proj.weight", {m.shared_inter, h}, R::kSharedGate);
        add(sh + "up_proj.weight", {m.shared_inter, h}, R::kSharedUp);
        add(sh + "down_proj.weight", {h, m.shared_inter}, R::kSharedDown);
      }
      if (m.shared_gate) add("mlp.shared_expert_gate.weight", {1, h}, R::kSharedExpertGate);
      continue;
    }
    if (c.fused_gate_up) {
      part("mlp.gate_up_proj.weight", {inter, h}, R::kGate, 0, 2 * inter);
      part("mlp.gate_up_proj.weight", {inter, h}, R::kUp, inter, 2 * inter);
    } else {
      add("mlp.gate_proj.weight", {inter, h}, R::kGate);
      add("mlp.up_proj.weight", {inter, h}, R::kUp);
    }
    add("mlp.down_proj.weight", {h, inter}, R::kDown);
    if (c.mlp_bias) {
      add("mlp.gate_proj.bias", {inter}, R::kGateBias);
      add("mlp.up_proj.bias", {inter}, R::kUpBias);
      add("mlp.down_proj.bias", {h}, R::kDownBias);
    }
  }
  w.push_back({model + "norm.weight", {h}, R::kFinalNorm});
  if (!c.tie_word_embeddings) w.push_back({"lm_head.weight", {c.vocab_size, h}, R::kLmHead});
  return w;
}

}  // namespace tessera
