#include "engine/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/dtype.h"
#include "engine/config_fields.h"

namespace tessera {
namespace {

using json = nlohmann::json;

using config_internal::FieldReader;

// LongRoPE (Phi-3 "longrope", formerly "su"): short and long per-frequency
// divisors and the pre-training context they extend, which HF reads from
// rope_scaling or, in Phi-3 configs, from the top level.
Status ParseLongRope(const json& root, const FieldReader& r, const std::string& label, ModelConfig* c) {
  RopeScaling& s = c->rope_scaling;
  s.type = RopeScalingType::kLongRope;
  const size_t n = static_cast<size_t>(c->rotary_dim / 2);
  const std::string why = "rotary dims / 2 = " + std::to_string(n);
  RETURN_IF_ERROR(r.PositiveList("short_factor", n, why, &s.short_factor));
  RETURN_IF_ERROR(r.PositiveList("long_factor", n, why, &s.long_factor));
  // >= 2: the attention factor divides by ln(original).
  RETURN_IF_ERROR(r.Int("original_max_position_embeddings", &s.original_max_position_embeddings, false, 2));
  if (s.original_max_position_embeddings == 0) {
    RETURN_IF_ERROR(FieldReader(root, label)
                        .Int("original_max_position_embeddings", &s.original_max_position_embeddings, true, 2));
  }
  s.factor = static_cast<double>(c->max_position_embeddings) / static_cast<double>(s.original_max_position_embeddings);
  RETURN_IF_ERROR(r.Double("factor", &s.factor, false, 0.0));
  RETURN_IF_ERROR(r.Double("attention_factor", &s.attention_factor, false, 0.0));
  return Status::Ok();
}

Status ParseRopeScaling(const json& root, const std::string& label, ModelConfig* c) {
  auto it = root.find("rope_scaling");
  if (it == root.end() || it->is_null()) return Status::Ok();
  if (!it->is_object()) {
    return InvalidArgument(label + ": field 'rope_scaling' must be an object or null, got " + it->dump());
  }
  const std::string sub = label + ": rope_scaling";
  FieldReader r(*it, sub);
  std::string type;
  RETURN_IF_ERROR(r.String("rope_type", &type));
  if (type.empty()) RETURN_IF_ERROR(r.String("type", &type));
  RopeScaling& s = c->rope_scaling;
  if (type.empty() || type == "default") {
    s.type = RopeScalingType::kNone;
    return Status::Ok();
  }
  if (type == "linear") {
    s.type = RopeScalingType::kLinear;
  } else if (type == "llama3") {
    s.type = RopeScalingType::kLlama3;
  } else if (type == "yarn") {
    s.type = RopeScalingType::kYarn;
  } else if (type == "longrope" || type == "su") {
    return ParseLongRope(root, r, label, c);
  } else {
    return Unimplemented(sub + ": field 'rope_type' value '" + type +
                         "' is not supported (supported: default, linear, llama3, yarn, longrope)");
  }
  RETURN_IF_ERROR(r.Double("factor", &s.factor, /*required=*/true, 0.0));
  if (s.type == RopeScalingType::kLlama3) {
    RETURN_IF_ERROR(r.Double("low_freq_factor", &s.low_freq_factor, true, 0.0));
    RETURN_IF_ERROR(r.Double("high_freq_factor", &s.high_freq_factor, true, 0.0));
    RETURN_IF_ERROR(r.Int("original_max_position_embeddings", &s.original_max_position_embeddings, true));
    if (s.high_freq_factor <= s.low_freq_factor) {
      return InvalidArgument(sub + ": field 'high_freq_factor' must be greater than 'low_freq_factor'");
    }
  }
  if (s.type == RopeScalingType::kYarn) {
    s.original_max_position_embeddings = c->max_position_embeddings;
    RETURN_IF_ERROR(r.Int("original_max_position_embeddings", &s.original_max_position_embeddings, false));
    RETURN_IF_ERROR(r.Double("beta_fast", &s.beta_fast, false, 0.0));
    RETURN_IF_ERROR(r.Double("beta_slow", &s.beta_slow, false, 0.0));
    RETURN_IF_ERROR(r.Double("attention_factor", &s.attention_factor, false, 0.0));
    RETURN_IF_ERROR(r.Double("mscale", &s.mscale, false, 0.0));
    RETURN_IF_ERROR(r.Double("mscale_all_dim", &s.mscale_all_dim, false, 0.0));
    RETURN_IF_ERROR(r.Bool("truncate", &s.truncate));
  }
  return Status::Ok();
}

// Mixtral / Qwen2-MoE / Qwen3-MoE fields (HF config names), validated.
Status ParseMoe(const json& root, const std::string& label, ModelConfig* c) {
  FieldReader r(root, label);
  const std::string& a = c->architecture;
  MoeConfig& m = c->moe;
  c->layer_moe.assign(c->num_layers, false);
  if (a == "MixtralForCausalLM") {
    // Every layer is MoE; each expert is intermediate_size wide; weights renormalised.
    m.num_experts = 8;  // MixtralConfig defaults
    m.top_k = 2;
    RETURN_IF_ERROR(r.Int("num_local_experts", &m.num_experts, false));
    RETURN_IF_ERROR(r.Int("num_experts_per_tok", &m.top_k, false));
    m.expert_inter = c->intermediate_size;
    m.norm_topk_prob = true;
    c->layer_moe.assign(c->num_layers, true);
  } else {
    // Qwen2-MoE / Qwen3-MoE: MoE on layers (i + 1) % decoder_sparse_step == 0
    // not in mlp_only_layers; dense layers are intermediate_size wide.
    RETURN_IF_ERROR(r.Int("num_experts", &m.num_experts, true));
    RETURN_IF_ERROR(r.Int("num_experts_per_tok", &m.top_k, true));
    RETURN_IF_ERROR(r.Int("moe_intermediate_size", &m.expert_inter, true));
    m.norm_topk_prob = false;  // Qwen2MoeConfig / Qwen3MoeConfig default
    RETURN_IF_ERROR(r.Bool("norm_topk_prob", &m.norm_topk_prob));
    int64_t step = 1;
    RETURN_IF_ERROR(r.Int("decoder_sparse_step", &step, false));
    std::vector<int64_t> mlp_only;
    RETURN_IF_ERROR(r.IntList("mlp_only_layers", &mlp_only));
    // Linear in the list and the layer count (a hostile file may list millions of entries).
    std::vector<bool> dense(c->num_layers, false);
    for (int64_t l : mlp_only) {
      if (l < 0 || l >= c->num_layers) {
        return InvalidArgument(label + ": field 'mlp_only_layers' names layer " + std::to_string(l) +
                               ", outside [0, num_hidden_layers = " + std::to_string(c->num_layers) + ")");
      }
      dense[l] = true;
    }
    for (int64_t i = 0; i < c->num_layers; ++i) c->layer_moe[i] = !dense[i] && (i + 1) % step == 0;
    if (a == "Qwen2MoeForCausalLM") {
      RETURN_IF_ERROR(r.Int("shared_expert_intermediate_size", &m.shared_inter, true));
      m.shared_gate = true;
    }
  }
  if (m.top_k > m.num_experts) {
    return InvalidArgument(label + ": field 'num_experts_per_tok' (" + std::to_string(m.top_k) + ") must be <= '" +
                           (a == "MixtralForCausalLM" ? "num_local_experts" : "num_experts") + "' (" +
                           std::to_string(m.num_experts) + ")");
  }
  constexpr int64_t kMaxExperts = 1 << 16;
  if (m.num_experts > kMaxExperts) {
    return InvalidArgument(label + ": field '" +
                           std::string(a == "MixtralForCausalLM" ? "num_local_experts" : "num_experts") +
                           "' must be <= " + std::to_string(kMaxExperts) + ", got " + std::to_string(m.num_experts));
  }
  if (c->num_moe_layers() == 0) {
    return InvalidArgument(label + ": fields 'decoder_sparse_step' and 'mlp_only_layers' leave no MoE layer");
  }
  return Status::Ok();
}

// layer_types (transformers >= 4.53): per layer "sliding_attention" or "full_attention".
// *listed is false when the field is absent (the architecture's default pattern applies).
Status ParseLayerTypes(const json& root, const std::string& label, int64_t layers, std::vector<bool>* sliding,
                       bool* listed) {
  sliding->assign(layers, false);
  auto types = root.find("layer_types");
  *listed = types != root.end() && !types->is_null();
  if (!*listed) return Status::Ok();
  if (!types->is_array() || static_cast<int64_t>(types->size()) != layers) {
    return InvalidArgument(label + ": field 'layer_types' must list one entry per layer (" + std::to_string(layers) +
                           ")");
  }
  for (int64_t i = 0; i < layers; ++i) {
    const json& t = (*types)[i];
    if (t == "sliding_attention") {
      (*sliding)[i] = true;
    } else if (t != "full_attention") {
      return InvalidArgument(label + ": field 'layer_types' entry " + std::to_string(i) + " is " + t.dump() +
                             " (expected \"sliding_attention\" or \"full_attention\")");
    }
  }
  return Status::Ok();
}

// --- gpt-oss (transformers' GptOssConfig field names): attention with biases and sinks,
// sliding (128) and full layers alternating, every layer a top-k MoE whose experts are
// intermediate_size wide with biases and the clamped SwiGLU.
Status ParseGptOss(const json& root, const std::string& label, ModelConfig* c) {
  FieldReader r(root, label);
  c->qkv_bias = true;
  RETURN_IF_ERROR(r.Bool("attention_bias", &c->qkv_bias));
  c->o_bias = c->qkv_bias;
  c->attn_sinks = true;
  int64_t window = 128;
  RETURN_IF_ERROR(r.Int("sliding_window", &window, false));
  std::vector<bool> sliding;
  bool listed = false;
  RETURN_IF_ERROR(ParseLayerTypes(root, label, c->num_layers, &sliding, &listed));
  for (int64_t i = 0; i < c->num_layers; ++i) {
    c->layer_sliding_window[i] = (listed ? sliding[i] : i % 2 == 0) ? window : 0;
  }
  MoeConfig& m = c->moe;
  m.num_experts = 128;  // GptOssConfig defaults
  m.top_k = 4;
  RETURN_IF_ERROR(r.Int("num_local_experts", &m.num_experts, false));
  RETURN_IF_ERROR(r.Int("experts_per_token", &m.top_k, false));  // older configs
  RETURN_IF_ERROR(r.Int("num_experts_per_tok", &m.top_k, false));
  m.expert_inter = c->intermediate_size;
  m.norm_topk_prob = true;  // the softmax over the k selected logits sums to 1
  m.scoring = MoeScoring::kSoftmaxTopK;
  m.router_bias = true;
  m.expert_bias = true;
  m.activation = MoeActivation::kSwigluOai;
  RETURN_IF_ERROR(r.Double("swiglu_limit", &m.swiglu_limit, false, 0.0));
  RETURN_IF_ERROR(r.Double("swiglu_alpha", &m.swiglu_alpha, false, 0.0));
  c->layer_moe.assign(c->num_layers, true);
  auto q = root.find("quantization_config");
  if (q != root.end() && !q->is_null()) {
    const std::string method = q->is_object() && q->contains("quant_method") && (*q)["quant_method"].is_string()
                                   ? (*q)["quant_method"].get<std::string>()
                                   : std::string();
    if (method != "mxfp4") {
      return Unimplemented(label + ": field 'quantization_config.quant_method' must be \"mxfp4\" for gpt-oss, got " +
                           (q->is_object() && q->contains("quant_method") ? (*q)["quant_method"].dump() : "none"));
    }
  }
  if (m.top_k > m.num_experts) {
    return InvalidArgument(label + ": field 'num_experts_per_tok' (" + std::to_string(m.top_k) +
                           ") must be <= 'num_local_experts' (" + std::to_string(m.num_experts) + ")");
  }
  if (m.num_experts > (1 << 16)) {
    return InvalidArgument(label + ": field 'num_local_experts' must be <= 65536, got " +
                           std::to_string(m.num_experts));
  }
  return Status::Ok();
}

// --- Gemma 2 / Gemma 3 (transformers' Gemma2Config / Gemma3TextConfig field names).

bool IsGemma(const std::string& a) {
  return a == "Gemma2ForCausalLM" || a == "Gemma3ForCausalLM" || a == "Gemma3ForConditionalGeneration";
}

// Gemma 3 with a vision tower keeps the decoder's fields in text_config (the
// published configs list only what differs from Gemma3TextConfig) and the
// token ids and dtype at the top level.
Status GemmaTextConfig(json* root, const std::string& label) {
  auto it = root->find("text_config");
  if (it == root->end() || !it->is_object()) {
    return InvalidArgument(label + ": field 'text_config' must be an object for Gemma3ForConditionalGeneration");
  }
  json text = *it;
  for (const char* key : {"eos_token_id", "bos_token_id", "torch_dtype", "tie_word_embeddings"}) {
    if (!text.contains(key) && root->contains(key)) text[key] = (*root)[key];
  }
  text["architectures"] = (*root)["architectures"];
  *root = std::move(text);
  return Status::Ok();
}

// transformers' defaults for the fields a Gemma config may omit (an explicit null
// keeps its meaning, e.g. final_logit_softcapping: null turns capping off).
void ApplyGemmaDefaults(const std::string& a, json* root) {
  const bool g2 = a == "Gemma2ForCausalLM";
  const json defaults = {
      {"vocab_size", g2 ? 256000 : 262208}, {"hidden_size", 2304}, {"intermediate_size", 9216},
      {"num_hidden_layers", 26}, {"num_attention_heads", 8}, {"num_key_value_heads", 4}, {"head_dim", 256},
      {"max_position_embeddings", g2 ? 8192 : 131072}, {"rms_norm_eps", 1e-6},
      {"rope_theta", g2 ? 10000.0 : 1000000.0}, {"tie_word_embeddings", true}, {"bos_token_id", 2},
      {"eos_token_id", 1}, {"query_pre_attn_scalar", 256}, {"sliding_window", 4096},
      {"final_logit_softcapping", g2 ? json(30.0) : json(nullptr)},
      {"attn_logit_softcapping", g2 ? json(50.0) : json(nullptr)}};
  for (const auto& [k, v] : defaults.items()) {
    if (!root->contains(k)) (*root)[k] = v;
  }
}

// A value rounded to the checkpoint's floating-point type (transformers computes
// Gemma's embedding normalizer as a tensor of the embedding's dtype).
double RoundToTorchDtype(double v, const std::string& torch_dtype) {
  const float f = static_cast<float>(v);
  if (torch_dtype == "bfloat16") return Bf16ToF32(F32ToBf16(f));
  if (torch_dtype == "float16") return F16ToF32(F32ToF16(f));
  return f;
}

Status ParseGemma(const json& root, const std::string& label, ModelConfig* c) {
  FieldReader r(root, label);
  const bool g2 = c->architecture == "Gemma2ForCausalLM";
  c->norm_weight_offset = 1.0;
  c->sandwich_norms = true;
  c->qk_norm = !g2;
  RETURN_IF_ERROR(r.Bool("attention_bias", &c->qkv_bias));
  c->o_bias = c->qkv_bias;
  c->embedding_scale = RoundToTorchDtype(std::sqrt(static_cast<double>(c->hidden_size)), c->torch_dtype);
  std::string act;
  RETURN_IF_ERROR(r.String("hidden_activation", &act));
  if (act.empty()) RETURN_IF_ERROR(r.String("hidden_act", &act));
  if (!act.empty() && act != "gelu_pytorch_tanh") {
    return Unimplemented(label + ": field 'hidden_activation' value '" + act +
                         "' is not supported for Gemma (supported: gelu_pytorch_tanh)");
  }
  c->hidden_act = GluActivation::kGeluTanh;
  RETURN_IF_ERROR(r.Double("query_pre_attn_scalar", &c->query_pre_attn_scalar, false, 0.0));
  RETURN_IF_ERROR(r.Double("attn_logit_softcapping", &c->attn_logit_softcapping, false, 0.0));
  RETURN_IF_ERROR(r.Double("final_logit_softcapping", &c->final_logit_softcapping, false, 0.0));
  int64_t window = 0;
  RETURN_IF_ERROR(r.Int("sliding_window", &window, false));
  // Which layers slide: layer_types when given, else Gemma 2 every other layer from
  // layer 0, Gemma 3 all but every sliding_window_pattern-th.
  std::vector<bool> sliding;
  bool listed = false;
  RETURN_IF_ERROR(ParseLayerTypes(root, label, c->num_layers, &sliding, &listed));
  if (!listed) {
    int64_t pattern = g2 ? 2 : 6;
    if (!g2) RETURN_IF_ERROR(r.Int("sliding_window_pattern", &pattern, false));
    for (int64_t i = 0; i < c->num_layers; ++i) sliding[i] = (i + 1) % pattern != 0;
  }
  c->layer_rope.assign(c->num_layers, 0);
  if (!g2) {
    c->rope_local_theta = 10000.0;
    RETURN_IF_ERROR(r.Double("rope_local_base_freq", &c->rope_local_theta, false, 1.0));
  }
  for (int64_t i = 0; i < c->num_layers; ++i) {
    c->layer_sliding_window[i] = sliding[i] ? window : 0;
    if (!g2 && sliding[i]) c->layer_rope[i] = 1;
  }
  if (c->architecture == "Gemma3ForConditionalGeneration") {
    c->weight_prefix = "language_model.model.";
    c->has_vision_tower = true;
  }
  return Status::Ok();
}

}  // namespace

const std::vector<std::string>& SupportedArchitectures() {
  static const std::vector<std::string> kArchs = {"LlamaForCausalLM",    "MistralForCausalLM",
                                                  "Qwen2ForCausalLM",    "Qwen3ForCausalLM",
                                                  "MixtralForCausalLM",  "Qwen2MoeForCausalLM",
                                                  "Qwen3MoeForCausalLM", "Phi3ForCausalLM",
                                                  "Gemma2ForCausalLM",   "Gemma3ForCausalLM",
                                                  "Gemma3ForConditionalGeneration", "GptOssForCausalLM",
                                                  "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM"};
  return kArchs;
}

int64_t ModelConfig::num_moe_layers() const {
  int64_t n = 0;
  for (bool m : layer_moe) n += m ? 1 : 0;
  return n;
}

namespace {

// Parameters of the layers, counting `experts` routed experts per MoE layer.
int64_t LayerParameters(const ModelConfig& c, int64_t experts) {
  const int64_t h = c.hidden_size;
  int64_t attn = h * c.num_q_heads * c.head_dim * 2 + h * c.num_kv_heads * c.head_dim * 2;
  if (c.attention == AttentionKind::kMla) {
    const MlaConfig& m = c.mla;
    const int64_t q_out = c.num_q_heads * c.head_dim;
    attn = (m.q_lora_rank > 0 ? m.q_lora_rank * (h + 1 + q_out) : h * q_out) +
           (m.kv_lora_rank + m.qk_rope_head_dim) * h + m.kv_lora_rank +
           m.kv_lora_rank * c.num_q_heads * (m.qk_nope_head_dim + m.v_head_dim) + c.num_q_heads * m.v_head_dim * h;
  }
  const int64_t moe = h * c.moe.num_experts + experts * 3 * h * c.moe.expert_inter +
                      3 * h * c.moe.shared_inter + (c.moe.shared_gate ? h : 0) +
                      (c.moe.router_bias ? c.moe.num_experts : 0) +
                      (c.moe.expert_bias ? experts * (2 * c.moe.expert_inter + h) : 0);
  const int64_t moe_layers = c.num_moe_layers();
  const int64_t norms = (c.sandwich_norms ? 4 : 2) * h;
  return c.num_layers * (attn + norms) + (c.num_layers - moe_layers) * 3 * h * c.intermediate_size +
         moe_layers * moe;
}

}  // namespace

int64_t ModelConfig::NumParameters() const {
  const int64_t emb = vocab_size * hidden_size * (tie_word_embeddings ? 1 : 2);
  return emb + LayerParameters(*this, moe.num_experts) + hidden_size;
}

int64_t ModelConfig::NumActiveParameters() const {
  return vocab_size * hidden_size + LayerParameters(*this, moe.top_k) + hidden_size;
}

std::string ModelConfig::Summary() const {
  std::ostringstream os;
  os << architecture << ": " << num_layers << " layers, hidden " << hidden_size << ", heads "
     << num_q_heads << "/" << num_kv_heads << " x " << head_dim << ", ffn " << intermediate_size
     << ", vocab " << vocab_size << ", " << NumParameters() / 1e6 << "M params";
  if (is_moe()) {
    os << " (MoE: " << num_moe_layers() << " layers of " << moe.num_experts << " experts x " << moe.expert_inter
       << ", top " << moe.top_k << (moe.shared_inter > 0 ? ", shared expert " + std::to_string(moe.shared_inter) : "")
       << "; " << NumActiveParameters() / 1e6 << "M active)";
  }
  return os.str();
}

namespace {

// partial_rotary_factor (Phi-4-mini): RoPE rotates the first int(head_dim *
// factor) dims of each head, as HF computes it. Only Phi-3's attention
// implements it; other architectures refuse a factor other than 1.
Status ParseRotaryDim(const FieldReader& r, const std::string& label, ModelConfig* c) {
  double factor = 1.0;
  RETURN_IF_ERROR(r.Double("partial_rotary_factor", &factor, false, 0.0));
  c->rotary_dim = c->head_dim;
  if (factor == 1.0) return Status::Ok();
  if (c->architecture != "Phi3ForCausalLM") {
    return Unimplemented(label + ": field 'partial_rotary_factor' must be 1 for " + c->architecture);
  }
  // HF takes int(head_dim * factor); a product within 1e-9 of an integer is that
  // integer (a factor written as rot / head_dim may land just below it).
  const double x = static_cast<double>(c->head_dim) * factor;
  const double near = std::round(x);
  const auto dim = static_cast<int64_t>(std::abs(x - near) < 1e-9 ? near : std::floor(x));
  if (factor > 1.0 || dim < 2 || dim % 2 != 0) {
    std::ostringstream os;
    os << label << ": field 'partial_rotary_factor' (" << factor << ") must give an even rotary dimension in [2, "
       << "head_dim = " << c->head_dim << "], got " << dim;
    return InvalidArgument(os.str());
  }
  c->rotary_dim = dim;
  return Status::Ok();
}

}  // namespace

StatusOr<ModelConfig> ParseModelConfig(const std::string& json_text, const std::string& label) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return InvalidArgument(label + ": not valid JSON");
  if (!root.is_object()) return InvalidArgument(label + ": top level must be a JSON object");

  ModelConfig c;
  auto archs = root.find("architectures");
  if (archs == root.end() || !archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
    return InvalidArgument(label + ": field 'architectures' must be a non-empty list of strings");
  }
  c.architecture = (*archs)[0].get<std::string>();
  bool known = false;
  for (const auto& a : SupportedArchitectures()) known |= (a == c.architecture);
  if (!known) {
    std::string list;
    for (const auto& a : SupportedArchitectures()) list += (list.empty() ? "" : ", ") + a;
    return Unimplemented(label + ": field 'architectures' names '" + c.architecture +
                         "', which is not supported (supported: " + list + ")");
  }
  if (c.architecture == "Gemma3ForConditionalGeneration") RETURN_IF_ERROR(GemmaTextConfig(&root, label));
  if (IsGemma(c.architecture)) ApplyGemmaDefaults(c.architecture, &root);
  FieldReader r(root, label);
  RETURN_IF_ERROR(r.String("model_type", &c.model_type));
  RETURN_IF_ERROR(r.Int("vocab_size", &c.vocab_size, true));
  RETURN_IF_ERROR(r.Int("hidden_size", &c.hidden_size, true));
  RETURN_IF_ERROR(r.Int("intermediate_size", &c.intermediate_size, true));
  RETURN_IF_ERROR(r.Int("num_hidden_layers", &c.num_layers, true));
  // Per-layer tables are sized from this; the deepest released models have ~130 layers.
  constexpr int64_t kMaxLayers = 4096;
  if (c.num_layers > kMaxLayers) {
    return InvalidArgument(label + ": field 'num_hidden_layers' must be <= " + std::to_string(kMaxLayers) +
                           ", got " + std::to_string(c.num_layers));
  }
  RETURN_IF_ERROR(r.Int("num_attention_heads", &c.num_q_heads, true));
  c.num_kv_heads = c.num_q_heads;
  RETURN_IF_ERROR(r.Int("num_key_value_heads", &c.num_kv_heads, false));
  if (c.num_q_heads % c.num_kv_heads != 0) {
    return InvalidArgument(label + ": field 'num_key_value_heads' (" + std::to_string(c.num_kv_heads) +
                           ") must divide 'num_attention_heads' (" + std::to_string(c.num_q_heads) + ")");
  }
  c.head_dim = 0;
  RETURN_IF_ERROR(r.Int("head_dim", &c.head_dim, false));
  if (c.head_dim == 0) {
    if (c.hidden_size % c.num_q_heads != 0) {
      return InvalidArgument(label + ": field 'hidden_size' must be divisible by 'num_attention_heads' "
                                     "when 'head_dim' is not given");
    }
    c.head_dim = c.hidden_size / c.num_q_heads;
  }
  if (c.head_dim % 2 != 0) {
    return InvalidArgument(label + ": field 'head_dim' must be even for rotary embeddings, got " +
                           std::to_string(c.head_dim));
  }
  c.max_position_embeddings = 4096;
  RETURN_IF_ERROR(r.Int("max_position_embeddings", &c.max_position_embeddings, false));
  RETURN_IF_ERROR(r.Double("rms_norm_eps", &c.rms_norm_eps, false, 0.0));
  RETURN_IF_ERROR(r.Double("rope_theta", &c.rope_theta, false, 1.0));
  RETURN_IF_ERROR(ParseRotaryDim(r, label, &c));
  RETURN_IF_ERROR(ParseRopeScaling(root, label, &c));
  RETURN_IF_ERROR(r.Bool("tie_word_embeddings", &c.tie_word_embeddings));
  RETURN_IF_ERROR(r.String("torch_dtype", &c.torch_dtype));
  RETURN_IF_ERROR(r.IntList("eos_token_id", &c.eos_token_ids));
  RETURN_IF_ERROR(r.Int("bos_token_id", &c.bos_token_id, false, 0));

  // Architecture traits, as data.
  const std::string& a = c.architecture;
  const bool moe = a == "MixtralForCausalLM" || a == "Qwen2MoeForCausalLM" || a == "Qwen3MoeForCausalLM";
  if (a == "Qwen2ForCausalLM") c.qkv_bias = true;
  if (a == "Qwen2MoeForCausalLM") {
    c.qkv_bias = true;  // Qwen2MoeAttention: q/k/v biases (qkv_bias in newer configs)
    RETURN_IF_ERROR(r.Bool("qkv_bias", &c.qkv_bias));
  }
  if (a == "Qwen3ForCausalLM" || a == "Qwen3MoeForCausalLM") {
    c.qk_norm = true;
    RETURN_IF_ERROR(r.Bool("attention_bias", &c.qkv_bias));
    c.o_bias = c.qkv_bias;
  }
  if (a == "Phi3ForCausalLM") {
    // Phi3Attention / Phi3MLP: fused projections, no biases.
    c.fused_qkv = true;
    c.fused_gate_up = true;
  }
  if (a == "LlamaForCausalLM" || a == "MistralForCausalLM") {
    RETURN_IF_ERROR(r.Bool("attention_bias", &c.qkv_bias));
    c.o_bias = c.qkv_bias;
    RETURN_IF_ERROR(r.Bool("mlp_bias", &c.mlp_bias));
  }

  // Sliding window: Mistral applies it on every layer when set; Qwen2/3 only with
  // use_sliding_window, on layers >= max_window_layers.
  c.layer_sliding_window.assign(c.num_layers, 0);
  int64_t window = 0;
  RETURN_IF_ERROR(r.Int("sliding_window", &window, false));
  if (window > 0) {
    if (a == "MistralForCausalLM" || a == "MixtralForCausalLM" || a == "Phi3ForCausalLM") {
      c.layer_sliding_window.assign(c.num_layers, window);
    } else if (a != "LlamaForCausalLM") {  // Qwen2/3 and their MoE variants
      bool use = false;
      RETURN_IF_ERROR(r.Bool("use_sliding_window", &use));
      int64_t max_window_layers = c.num_layers;
      RETURN_IF_ERROR(r.Int("max_window_layers", &max_window_layers, false, 0));
      if (use) {
        for (int64_t i = max_window_layers; i < c.num_layers; ++i) c.layer_sliding_window[i] = window;
      }
    }
  }
  c.layer_moe.assign(c.num_layers, false);
  c.layer_rope.assign(c.num_layers, 0);
  if (moe) RETURN_IF_ERROR(ParseMoe(root, label, &c));
  if (IsGemma(a)) RETURN_IF_ERROR(ParseGemma(root, label, &c));
  if (a == "GptOssForCausalLM") RETURN_IF_ERROR(ParseGptOss(root, label, &c));
  if (a == "DeepseekV2ForCausalLM" || a == "DeepseekV3ForCausalLM") {
    RETURN_IF_ERROR(config_internal::ParseDeepseek(root, label, &c));
  }
  return c;
}

namespace {

// generation_config.json's eos_token_id (an id or a list), appended to config.json's.
Status MergeGenerationConfigEos(const std::string& text, const std::string& label, ModelConfig* c) {
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) return InvalidArgument(label + ": not a JSON object");
  std::vector<int64_t> ids;
  RETURN_IF_ERROR(FieldReader(root, label).IntList("eos_token_id", &ids));
  for (int64_t id : ids) {
    if (id < 0) return InvalidArgument(label + ": field 'eos_token_id' holds a negative id");
    if (std::find(c->eos_token_ids.begin(), c->eos_token_ids.end(), id) == c->eos_token_ids.end()) {
      c->eos_token_ids.push_back(id);
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open (is --model an HF checkpoint directory?)");
  std::stringstream ss;
  ss << in.rdbuf();
  ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfig(ss.str(), path));
  // generation_config.json's end-of-sequence ids stop generation too, as in vLLM and HF
  // generate (gpt-oss: <|return|> in config.json, <|call|> and <|endoftext|> only here).
  const std::string gen_path = model_dir + "/generation_config.json";
  std::ifstream gen(gen_path);
  if (gen) {
    std::stringstream gs;
    gs << gen.rdbuf();
    RETURN_IF_ERROR(MergeGenerationConfigEos(gs.str(), gen_path, &c));
  }
  return c;
}

}  // namespace tessera
