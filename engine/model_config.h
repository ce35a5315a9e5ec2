// ModelConfig: one decoder described as data, parsed from HF config.json.
//
// Llama, Mistral, Qwen2, Qwen3 and Phi-3/Phi-4 differ only in fields here (qkv
// bias, q/k norm, sliding window, rope scaling, partial rotary, fused projections);
// the forward pass reads these flags instead of switching on the architecture name. Mixtral, Qwen2-MoE and Qwen3-MoE are the
// same decoder with a mixture-of-experts FFN on the layers `layer_moe` marks
// (MoeConfig; the block is engine/moe/). DeepSeek-V2/V3 replace attention with
// multi-head latent attention (MlaConfig; the block is engine/mla/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera {

enum class RopeScalingType { kNone, kLinear, kLlama3, kYarn, kLongRope };

// The gated FFN's activation: down(act(gate x) * up x).
enum class GluActivation { kSilu, kGeluTanh };  // SwiGLU (Llama, Qwen) | GeGLU with tanh-GELU (Gemma)

// Which dims RoPE rotates together: (i, i + rot/2) "rotate half" (GPT-NeoX, HF Llama)
// or adjacent pairs (2i, 2i + 1) (GPT-J; DeepSeek's rope_interleave). Both read the same
// cos/sin table (engine/rope.h): pair i turns by position * inv_freq[i].
enum class RopeStyle { kHalf, kInterleaved };

// Multi-head attention (K and V rows per KV head) or DeepSeek's multi-head latent
// attention, whose cache row per token is the compressed latent plus the shared
// rope key (engine/kv_layout.h; docs/architecture.md, "Engine").
enum class AttentionKind { kMha, kMla };

// MLA dimensions (HF DeepseekV2Config / DeepseekV3Config names).
struct MlaConfig {
  int64_t q_lora_rank = 0;       // 0: plain q_proj (V2-Lite); else q_a_proj -> norm -> q_b_proj
  int64_t kv_lora_rank = 0;      // latent width r: the cache holds r + qk_rope_head_dim per token
  int64_t qk_nope_head_dim = 0;  // per head, the query/key part without position
  int64_t qk_rope_head_dim = 0;  // per head, the rotated part (the key's is shared by all heads)
  int64_t v_head_dim = 0;
};

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 0.0;  // 0: derived from factor (and mscale fields)
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  bool truncate = true;
  // longrope (Phi-3 "su"): per-frequency divisors, rotary_dim / 2 of each. Which
  // set a deployment uses is chosen once from its max model length (engine/rope.h
  // UseLongRopeFactors); `factor` is max_position_embeddings / original when the
  // config gives none, and only sets the default attention factor.
  std::vector<double> short_factor, long_factor;
};

// How a token's router logits become its top_k expert ids and weights (engine/moe/).
enum class MoeScoring {
  kSoftmax,      // softmax over all experts, then the top_k probabilities (Mixtral, Qwen)
  kSoftmaxTopK,  // the top_k logits, then a softmax over those k only (gpt-oss)
  kSigmoid,      // sigmoid of each logit, then the top_k (DeepSeek-V3 scoring_func sigmoid)
};
// DeepSeekMoE's topk_method: which experts may be chosen (HF / vLLM names).
enum class MoeTopkMethod {
  kGreedy,              // top_k over all experts
  kGroupLimitedGreedy,  // top topk_group of n_group groups by their best score, then top_k inside (V2)
  kNoauxTc,             // groups by the sum of their 2 best biased scores (V3, e_score_correction_bias)
};
// A routed expert's gated activation act(g, u), g = gate x, u = up x.
enum class MoeActivation {
  kSilu,       // silu(g) * u
  kSwigluOai,  // g' = min(g, limit), u' = clamp(u, -limit, limit): g' * sigmoid(alpha g') * (u' + 1) (gpt-oss)
};

// The routed-expert FFN of MoE layers (engine/moe/). num_experts == 0: dense model.
struct MoeConfig {
  int64_t num_experts = 0;       // num_local_experts (Mixtral) / num_experts (Qwen)
  int64_t top_k = 0;             // num_experts_per_tok
  int64_t expert_inter = 0;      // each expert's SwiGLU width (moe_intermediate_size)
  bool norm_topk_prob = true;    // divide the k softmax weights by their sum
  int64_t shared_inter = 0;      // shared expert width (Qwen2-MoE); 0: none
  bool shared_gate = false;      // shared expert scaled by sigmoid(shared_expert_gate . x)
  MoeScoring scoring = MoeScoring::kSoftmax;
  bool router_bias = false;      // router logits = W_r x + b_r (gpt-oss mlp.router.bias)
  bool expert_bias = false;      // each expert's gate/up/down have biases (gpt-oss)
  MoeActivation activation = MoeActivation::kSilu;
  double swiglu_alpha = 1.702;   // kSwigluOai only
  double swiglu_limit = 7.0;     // kSwigluOai only
  // DeepSeek: the k routed weights times this, after the optional renormalisation.
  double routed_scaling_factor = 1.0;
  MoeTopkMethod topk_method = MoeTopkMethod::kGreedy;
  int64_t n_group = 1, topk_group = 1;  // grouped methods: E / n_group consecutive ids per group
  // noaux_tc: mlp.gate.e_score_correction_bias [E] is added to the scores to choose
  // experts only; the weights come from the unbiased scores.
  bool score_correction_bias = false;
};

struct ModelConfig {
  std::string architecture;  // e.g. "Qwen3ForCausalLM"
  std::string model_type;    // e.g. "qwen3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_q_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // biases on q/k/v projections
  bool o_bias = false;    // bias on o_proj (Llama attention_bias)
  bool mlp_bias = false;  // biases on gate/up/down (Llama mlp_bias)
  bool qk_norm = false;   // per-head RMSNorm on q and k before RoPE (Qwen3)
  // A learned logit per query head in every softmax denominator (gpt-oss self_attn.sinks):
  // the head may attend to "nothing" (docs/architecture.md, "Engine").
  bool attn_sinks = false;
  // Per layer: attention window in tokens (0 = full causal attention).
  std::vector<int64_t> layer_sliding_window;
  MoeConfig moe;
  // Per layer: true when its FFN is the MoE block, false for the dense SwiGLU
  // of width intermediate_size (all false for dense models).
  std::vector<bool> layer_moe;
  std::vector<int64_t> eos_token_ids;  // config.json's, then generation_config.json's (LoadModelConfig)
  int64_t bos_token_id = -1;
  std::string torch_dtype;  // informational
  // Leading dims of each head that RoPE rotates: head_dim * partial_rotary_factor
  // (Phi-4-mini 0.75); == head_dim otherwise. Even, in [2, head_dim].
  int64_t rotary_dim = 0;
  // Phi-3: q/k/v stored as one qkv_proj [q | k | v rows] and gate/up as one
  // gate_up_proj [gate | up rows]; the loader binds row ranges of them (weight_specs.h).
  bool fused_qkv = false;
  bool fused_gate_up = false;

  // --- Gemma 2 / Gemma 3 traits (docs/architecture.md, "Engine"); the defaults are the
  // Llama-style decoder, so other architectures never see them.
  // Prefix of every decoder tensor name ("language_model.model." for Gemma 3 checkpoints
  // with a vision tower, which is not loaded: has_vision_tower says one was skipped).
  std::string weight_prefix = "model.";
  bool has_vision_tower = false;
  // residual = embed(ids) * embedding_scale (Gemma: sqrt(hidden_size), rounded to the
  // checkpoint dtype as transformers does; GGUF: f32 as llama.cpp).
  double embedding_scale = 1.0;
  // Every RMSNorm multiplies by (norm_weight_offset + w): Gemma's (1 + w) in HF
  // checkpoints. Folded into the weights at load (GGUF files store 1 + w already: 0).
  double norm_weight_offset = 0.0;
  // RMSNorms on the attention and MLP outputs before each residual add
  // (post_attention_layernorm / post_feedforward_layernorm; the MLP input norm is then
  // pre_feedforward_layernorm).
  bool sandwich_norms = false;
  GluActivation hidden_act = GluActivation::kSilu;
  // Attention scale query_pre_attn_scalar^-0.5; 0: head_dim^-0.5.
  double query_pre_attn_scalar = 0.0;
  // scores -> cap * tanh(scores / cap) before the softmax, logits likewise (0: off).
  double attn_logit_softcapping = 0.0;
  double final_logit_softcapping = 0.0;
  // > 0: a second RoPE table with this base and no scaling (Gemma 3's
  // rope_local_base_freq), used by the layers whose layer_rope entry is 1.
  double rope_local_theta = 0.0;
  std::vector<int32_t> layer_rope;  // per layer: 0 = rope_theta + rope_scaling, 1 = local

  // --- DeepSeek-V2/V3 (engine/mla/). With kMla, head_dim is the query/key head
  // (qk_nope_head_dim + qk_rope_head_dim), rotary_dim is qk_rope_head_dim, and
  // num_kv_heads is not a cache dimension (the latent is shared by all heads).
  AttentionKind attention = AttentionKind::kMha;
  MlaConfig mla;
  RopeStyle rope_style = RopeStyle::kHalf;
  // > 0: the softmax scale (MLA: head_dim^-1/2 times YaRN's mscale(factor,
  // mscale_all_dim) squared); 0: derived from head_dim / query_pre_attn_scalar.
  double attn_scale = 0.0;

  // KV cache bytes one token occupies across all layers, at `bytes_per_elem`
  // (engine/kv_layout.h: K and V rows, or the MLA latent row).
  int64_t KvBytesPerToken(int64_t bytes_per_elem) const;
  bool is_moe() const { return moe.num_experts > 0; }
  int64_t num_moe_layers() const;
  // Approximate parameter count (embeddings, lm_head and all layers).
  int64_t NumParameters() const;
  // Parameters one token reads: as NumParameters, but only top_k experts per
  // MoE layer, and the embedding table once (lm_head).
  int64_t NumActiveParameters() const;
  std::string Summary() const;
};

// Supported HF architecture names.
const std::vector<std::string>& SupportedArchitectures();

// Parses config.json text. `file_label` names the file in error messages, which
// also name the offending field, e.g. "m/config.json: field 'num_key_value_heads' ...".
StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& file_label);
// Reads and parses DIR/config.json, and adds DIR/generation_config.json's eos_token_id
// (when the file exists) to eos_token_ids; a malformed one is an error naming its field.
StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

}  // namespace tessera
