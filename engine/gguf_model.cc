#include "engine/gguf_model.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "engine/gguf_deepseek.h"
#include "engine/gguf_meta.h"
#include "engine/rope.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using Meta = GgufMeta;

std::string ShapeStr(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}


// Llama 3 rope scaling is stored as a rope_freqs tensor of per-frequency
// wavelength factors. Recognise the published Llama 3.x parameters from it.
Status RopeFreqsToScaling(const GgufTensor& t, double base, int64_t head_dim, const std::string& label,
                          json* rope_scaling) {
  const int64_t n = head_dim / 2;
  if (t.dtype != DType::kF32 || t.ne.size() != 1 || t.ne[0] != n) {
    return InvalidArgument(label + ": tensor 'rope_freqs.weight' must be f32 [" + std::to_string(n) + "]");
  }
  std::vector<float> f(n);
  std::memcpy(f.data(), t.data, n * 4);
  double factor = 1.0;
  for (float x : f) factor = std::max(factor, static_cast<double>(x));
  const double low = 1.0, high = 4.0, old_ctx = 8192.0;
  for (int64_t i = 0; i < n; ++i) {
    const double freq = 1.0 / std::pow(base, 2.0 * i / head_dim);
    const double wavelen = 2.0 * M_PI / freq;
    double expect = 1.0;
    if (wavelen > old_ctx / low) {
      expect = factor;
    } else if (wavelen >= old_ctx / high) {
      const double smooth = (old_ctx / wavelen - low) / (high - low);
      expect = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    if (std::abs(f[i] - expect) > 1e-3 * expect) {
      return Unimplemented(label + ": tensor 'rope_freqs.weight' is not Llama 3 rope scaling with "
                           "low_freq_factor 1, high_freq_factor 4, original context 8192 (entry " +
                           std::to_string(i) + ")");
    }
  }
  if (factor == 1.0) return Status::Ok();
  *rope_scaling = {{"rope_type", "llama3"}, {"factor", factor}, {"low_freq_factor", low},
                   {"high_freq_factor", high}, {"original_max_position_embeddings", 8192}};
  return Status::Ok();
}

// MoE fields from llama.cpp's {arch}.expert_* keys; which layers are MoE from
// the router tensors present (llama.cpp has no decoder_sparse_step key).
Status GgufMoeConfig(const GgufContents& g, const Meta& m, const std::string& arch, int64_t layers, json* c) {
  const std::string p = arch + ".";
  ASSIGN_OR_RETURN(int64_t experts, m.Int(p + "expert_count", 0));
  const bool moe_arch = arch == "qwen2moe" || arch == "qwen3moe" || arch == "gpt-oss";
  if (experts == 0 && !moe_arch) return Status::Ok();
  if (experts <= 0 || experts > (1 << 16)) {
    return InvalidArgument(m.label() + ": metadata '" + p + "expert_count' must be in [1, 65536], got " +
                           std::to_string(experts));
  }
  ASSIGN_OR_RETURN(int64_t used, m.Int(p + "expert_used_count"));
  if (used <= 0 || used > experts) {
    return InvalidArgument(m.label() + ": metadata '" + p + "expert_used_count' must be in [1, expert_count = " +
                           std::to_string(experts) + "], got " + std::to_string(used));
  }
  // llama.cpp renormalises the top-k weights for llama (Mixtral) and qwen3moe,
  // not for qwen2moe; expert_weights_norm overrides.
  ASSIGN_OR_RETURN(bool norm, m.Bool(p + "expert_weights_norm", arch != "qwen2moe"));
  (*c)["num_experts_per_tok"] = used;
  if (arch == "gpt-oss") {  // every layer; each expert is the (expert_)feed_forward_length wide
    (*c)["num_local_experts"] = experts;
    ASSIGN_OR_RETURN(int64_t expert_ffn, m.Int(p + "expert_feed_forward_length"));
    if (expert_ffn <= 0 || expert_ffn > (1 << 24)) {
      return InvalidArgument(m.label() + ": metadata '" + p + "expert_feed_forward_length' must be in [1, 2^24]");
    }
    (*c)["intermediate_size"] = expert_ffn;
    return Status::Ok();
  }
  if (arch == "llama") {
    (*c)["architectures"] = {"MixtralForCausalLM"};
    (*c)["num_local_experts"] = experts;
    if (!norm) return Unimplemented(m.label() + ": metadata '" + p + "expert_weights_norm' false for llama");
    return Status::Ok();
  }
  (*c)["num_experts"] = experts;
  (*c)["norm_topk_prob"] = norm;
  ASSIGN_OR_RETURN(int64_t expert_ffn, m.Int(p + "expert_feed_forward_length"));
  if (expert_ffn <= 0 || expert_ffn > (1 << 24)) {
    return InvalidArgument(m.label() + ": metadata '" + p + "expert_feed_forward_length' must be in [1, 2^24]");
  }
  (*c)["moe_intermediate_size"] = expert_ffn;
  if (arch == "qwen2moe") {
    ASSIGN_OR_RETURN(int64_t shared, m.Int(p + "expert_shared_feed_forward_length"));
    if (shared < 0 || shared > (1 << 24)) {
      return InvalidArgument(m.label() + ": metadata '" + p + "expert_shared_feed_forward_length' must be in "
                             "[0, 2^24]");
    }
    (*c)["shared_expert_intermediate_size"] = shared;
  }
  // One pass over the tensors (not a name search per layer: that is layers x tensors).
  std::vector<bool> routed(layers, false);
  constexpr std::string_view kPre = "blk.", kSuf = ".ffn_gate_inp.weight";
  for (const GgufTensor& t : g.tensors) {
    const std::string_view n = t.name;
    if (n.size() <= kPre.size() + kSuf.size() || !n.starts_with(kPre) || !n.ends_with(kSuf)) continue;
    const std::string_view num = n.substr(kPre.size(), n.size() - kPre.size() - kSuf.size());
    int64_t i = 0;
    auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), i);
    if (ec == std::errc() && end == num.data() + num.size() && i >= 0 && i < layers &&
        std::to_string(i) == num) {
      routed[i] = true;
    }
  }
  json dense = json::array();
  for (int64_t i = 0; i < layers; ++i) {
    if (!routed[i]) dense.push_back(i);
  }
  if (static_cast<int64_t>(dense.size()) == layers) {
    return NotFound(m.label() + ": missing tensor 'blk.0.ffn_gate_inp.weight' (an MoE model needs a router)");
  }
  (*c)["mlp_only_layers"] = dense;
  return Status::Ok();
}

// An f32 vector tensor of `n` entries, each finite and > 0 (LongRoPE factors).
StatusOr<json> PositiveF32Vector(const GgufTensor& t, int64_t n, const std::string& label) {
  if (t.dtype != DType::kF32 || t.ne.size() != 1 || t.ne[0] != n) {
    return InvalidArgument(label + ": tensor '" + t.name + "' must be f32 [" + std::to_string(n) + "] (rope dims / 2)");
  }
  json out = json::array();
  for (int64_t i = 0; i < n; ++i) {
    float x;
    std::memcpy(&x, t.data + 4 * i, 4);
    if (!std::isfinite(x) || !(x > 0.0f)) {
      return InvalidArgument(label + ": tensor '" + t.name + "' entry " + std::to_string(i) + " must be > 0");
    }
    out.push_back(static_cast<double>(x));
  }
  return out;
}

// Phi-3 / Phi-4 (llama.cpp "phi3"): rope.dimension_count below the head size
// is partial rotary; a window on every layer (llama.cpp itself disables it, HF
// and vLLM apply it: we follow the checkpoint); LongRoPE from the two factor
// tensors, the pre-training context and the attention factor key.
Status GgufPhi3Config(const GgufContents& g, const Meta& m, int64_t head_dim, int64_t ctx, json* c) {
  const std::string p = "phi3.";
  ASSIGN_OR_RETURN(int64_t rot, m.Int(p + "rope.dimension_count", head_dim));
  if (rot < 2 || rot > head_dim || rot % 2 != 0) {
    return InvalidArgument(m.label() + ": metadata '" + p + "rope.dimension_count' must be even in [2, " +
                           std::to_string(head_dim) + "], got " + std::to_string(rot));
  }
  // ParseModelConfig turns the factor back into rot (exact for these ratios).
  if (rot != head_dim) (*c)["partial_rotary_factor"] = static_cast<double>(rot) / static_cast<double>(head_dim);
  ASSIGN_OR_RETURN(int64_t window, m.Int(p + "attention.sliding_window", 0));
  if (window > 0) (*c)["sliding_window"] = window;
  const GgufTensor* lf = g.FindTensor("rope_factors_long.weight");
  const GgufTensor* sf = g.FindTensor("rope_factors_short.weight");
  if (!lf && !sf) return Status::Ok();
  if (!lf || !sf) {
    return NotFound(m.label() + ": missing tensor '" + std::string(lf ? "rope_factors_short" : "rope_factors_long") +
                    ".weight' (LongRoPE needs both factor sets)");
  }
  json s = {{"rope_type", "longrope"}};
  ASSIGN_OR_RETURN(s["long_factor"], PositiveF32Vector(*lf, rot / 2, m.label()));
  ASSIGN_OR_RETURN(s["short_factor"], PositiveF32Vector(*sf, rot / 2, m.label()));
  ASSIGN_OR_RETURN(int64_t orig, m.Int(p + "rope.scaling.original_context_length"));
  if (orig <= 0) {
    return InvalidArgument(m.label() + ": metadata '" + p + "rope.scaling.original_context_length' must be >= 1");
  }
  s["original_max_position_embeddings"] = orig;
  // The converter stores sqrt(1 + ln(ctx / orig) / ln(orig)) (1 when ctx <= orig)
  // as an f32; keep the derivation (exact in f64) unless the file says otherwise.
  const double scale = static_cast<double>(ctx) / static_cast<double>(orig);
  const double derived = scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(orig))) : 1.0;
  ASSIGN_OR_RETURN(double attn, m.Num(p + "rope.scaling.attn_factor", derived));
  if (!(attn > 0.0)) return InvalidArgument(m.label() + ": metadata '" + p + "rope.scaling.attn_factor' must be > 0");
  if (static_cast<float>(attn) != static_cast<float>(derived)) s["attention_factor"] = attn;
  (*c)["rope_scaling"] = s;
  return Status::Ok();
}

// Gemma 2 / Gemma 3 keys (llama.cpp's gemma2/gemma3 hparams) as Gemma2Config /
// Gemma3TextConfig fields. The norm weights in these files already hold 1 + w
// (llama.cpp's converter adds the 1), which GgufModelConfig records.
Status GgufGemmaConfig(const Meta& m, const std::string& arch, int64_t layers, int64_t hidden, int64_t heads,
                       int64_t head_dim, double theta, json* c) {
  const std::string p = arch + ".";
  const bool g2 = arch == "gemma2";
  (*c)["hidden_activation"] = "gelu_pytorch_tanh";
  if (head_dim <= 0) head_dim = 256;  // the Gemma configs' default, as llama.cpp's converter writes it
  (*c)["head_dim"] = head_dim;
  // GGUF has no query_pre_attn_scalar: llama.cpp scales by hidden / heads for the 27B
  // shapes (46 layers for Gemma 2, 62 for Gemma 3), else by head_dim, as gemma_pytorch.
  const bool big = layers == (g2 ? 46 : 62);
  (*c)["query_pre_attn_scalar"] = big ? hidden / heads : head_dim;
  // Soft-capping changes every score and logit, so a Gemma 2 file must say its caps;
  // Gemma 3 has no attention capping and caps logits only when the key is present.
  if (g2) {
    ASSIGN_OR_RETURN(double attn_cap, m.Num(p + "attn_logit_softcapping"));
    ASSIGN_OR_RETURN(double final_cap, m.Num(p + "final_logit_softcapping"));
    (*c)["attn_logit_softcapping"] = attn_cap;
    (*c)["final_logit_softcapping"] = final_cap;
  } else {
    ASSIGN_OR_RETURN(double attn_cap, m.Num(p + "attn_logit_softcapping", 0.0));
    ASSIGN_OR_RETURN(double final_cap, m.Num(p + "final_logit_softcapping", 0.0));
    (*c)["attn_logit_softcapping"] = attn_cap > 0 ? json(attn_cap) : json(nullptr);
    (*c)["final_logit_softcapping"] = final_cap > 0 ? json(final_cap) : json(nullptr);
  }
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    if ((*c)[key].is_number() && !((*c)[key].get<double>() > 0)) {
      return InvalidArgument(m.label() + ": metadata '" + p + key + "' must be > 0");
    }
  }
  ASSIGN_OR_RETURN(int64_t window, m.Int(p + "attention.sliding_window", g2 ? 4096 : 0));
  if (window < 0) return InvalidArgument(m.label() + ": metadata '" + p + "attention.sliding_window' must be >= 0");
  (*c)["sliding_window"] = window;
  // Sliding layers: attention.sliding_window_pattern, a period n (layer i slides when
  // i % n < n - 1) or one bool per layer; default period 2 (Gemma 2) / 6 (Gemma 3).
  json types = json::array();
  const GgufValue* pat = m.Find(p + "attention.sliding_window_pattern");
  if (pat != nullptr && pat->type == GgufType::kArray) {
    if (pat->array_type != GgufType::kBool || static_cast<int64_t>(pat->array.size()) != layers) {
      return InvalidArgument(m.label() + ": metadata '" + p + "attention.sliding_window_pattern' must be an "
                             "integer or one bool per layer (" + std::to_string(layers) + ")");
    }
    for (const GgufValue& v : pat->array) types.push_back(v.u != 0 ? "sliding_attention" : "full_attention");
  } else {
    ASSIGN_OR_RETURN(int64_t n, m.Int(p + "attention.sliding_window_pattern", g2 ? 2 : 6));
    if (n < 1) {
      return InvalidArgument(m.label() + ": metadata '" + p + "attention.sliding_window_pattern' must be >= 1");
    }
    for (int64_t i = 0; i < layers; ++i) types.push_back(i % n < n - 1 ? "sliding_attention" : "full_attention");
  }
  if (window == 0) {
    for (auto& t : types) t = "full_attention";
  }
  (*c)["layer_types"] = types;
  ASSIGN_OR_RETURN(double local_theta, m.Num(p + "rope.freq_base_swa", g2 ? theta : 10000.0));
  if (g2 && local_theta != theta) {
    return Unimplemented(m.label() + ": metadata '" + p + "rope.freq_base_swa' differs from rope.freq_base; "
                         "Gemma 2 uses one RoPE base");
  }
  if (!g2) (*c)["rope_local_base_freq"] = local_theta;
  return Status::Ok();
}

}  // namespace

std::vector<std::pair<std::string, std::vector<float>>> GgufRopeFactorTensors(const ModelConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  if (s.type != RopeScalingType::kLongRope) return {};
  auto f32 = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  return {{"rope_factors_long.weight", f32(s.long_factor)}, {"rope_factors_short.weight", f32(s.short_factor)}};
}

StatusOr<std::string> ResolveGgufPath(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path;
  if (!fs::is_directory(path, ec)) return std::string();
  std::vector<std::string> ggufs;
  bool safetensors = false;
  for (const auto& e : fs::directory_iterator(path, ec)) {
    const std::string ext = e.path().extension().string();
    if (ext == ".gguf") ggufs.push_back(e.path().string());
    if (ext == ".safetensors") safetensors = true;
  }
  if (safetensors || ggufs.empty()) return std::string();
  if (ggufs.size() > 1) {
    return InvalidArgument(path + ": holds " + std::to_string(ggufs.size()) +
                           " .gguf files and no safetensors; pass one .gguf file as the model");
  }
  return ggufs[0];
}

std::string GgufArchFor(const std::string& model_type) {
  if (model_type == "llama" || model_type == "mistral" || model_type == "mixtral") return "llama";
  if (model_type == "qwen2" || model_type == "qwen3" || model_type == "phi3") return model_type;
  if (model_type == "qwen2_moe" || model_type == "qwen2moe") return "qwen2moe";
  if (model_type == "qwen3_moe" || model_type == "qwen3moe") return "qwen3moe";
  if (model_type == "gemma2") return "gemma2";
  if (model_type == "gemma3" || model_type == "gemma3_text") return "gemma3";
  if (model_type == "gpt_oss" || model_type == "gpt-oss") return "gpt-oss";
  if (model_type == "deepseek_v2" || model_type == "deepseek_v3" || model_type == "deepseek2") return "deepseek2";
  return "";
}

StatusOr<ModelConfig> GgufModelConfig(const GgufContents& g, const std::string& label) {
  Meta m(g, label);
  ASSIGN_OR_RETURN(std::string arch, m.Str("general.architecture"));
  json c;
  if (arch == "llama") {
    c["architectures"] = {"LlamaForCausalLM"};
  } else if (arch == "qwen2") {
    c["architectures"] = {"Qwen2ForCausalLM"};
  } else if (arch == "qwen3") {
    c["architectures"] = {"Qwen3ForCausalLM"};
  } else if (arch == "qwen2moe") {
    c["architectures"] = {"Qwen2MoeForCausalLM"};
  } else if (arch == "qwen3moe") {
    c["architectures"] = {"Qwen3MoeForCausalLM"};
  } else if (arch == "phi3") {
    c["architectures"] = {"Phi3ForCausalLM"};
  } else if (arch == "gemma2") {
    c["architectures"] = {"Gemma2ForCausalLM"};
  } else if (arch == "gemma3") {
    c["architectures"] = {"Gemma3ForCausalLM"};
  } else if (arch == "gpt-oss") {
    c["architectures"] = {"GptOssForCausalLM"};
  } else if (arch == "deepseek2") {
    c["architectures"] = {"DeepseekV2ForCausalLM"};  // V3 by its routing (GgufDeepseekConfig)
  } else {
    return Unimplemented(label + ": metadata 'general.architecture' is '" + arch +
                         "', which is not supported (supported: llama, qwen2, qwen3, qwen2moe, qwen3moe, phi3, "
                         "gemma2, gemma3, gpt-oss, deepseek2)");
  }
  c["model_type"] = arch;
  const std::string p = arch + ".";
  ASSIGN_OR_RETURN(int64_t layers, m.Int(p + "block_count"));
  ASSIGN_OR_RETURN(int64_t hidden, m.Int(p + "embedding_length"));
  ASSIGN_OR_RETURN(int64_t ffn, m.Int(p + "feed_forward_length"));
  ASSIGN_OR_RETURN(int64_t heads, m.Int(p + "attention.head_count"));
  ASSIGN_OR_RETURN(int64_t kv_heads, m.Int(p + "attention.head_count_kv", heads));
  for (auto [key, v] : {std::pair{"block_count", layers}, {"embedding_length", hidden},
                        {"feed_forward_length", ffn}, {"attention.head_count", heads},
                        {"attention.head_count_kv", kv_heads}}) {
    if (v <= 0 || v > (1 << 24)) {
      return InvalidArgument(label + ": metadata '" + p + key + "' must be in [1, 2^24], got " + std::to_string(v));
    }
  }
  if (layers > 4096) {  // the same bound ParseModelConfig puts on num_hidden_layers
    return InvalidArgument(label + ": metadata '" + p + "block_count' must be in [1, 4096], got " +
                           std::to_string(layers));
  }
  ASSIGN_OR_RETURN(int64_t head_dim, m.Int(p + "attention.key_length", 0));
  ASSIGN_OR_RETURN(int64_t value_dim, m.Int(p + "attention.value_length", head_dim));
  const bool deepseek = arch == "deepseek2";  // MLA: the lengths describe the latent (GgufDeepseekConfig)
  if (value_dim != head_dim && !deepseek) {
    return Unimplemented(label + ": metadata '" + p + "attention.value_length' differs from key_length");
  }
  ASSIGN_OR_RETURN(int64_t ctx, m.Int(p + "context_length"));
  ASSIGN_OR_RETURN(double theta, m.Num(p + "rope.freq_base", 10000.0));
  ASSIGN_OR_RETURN(double eps, m.Num(p + "attention.layer_norm_rms_epsilon"));
  const GgufTensor* embd = g.FindTensor("token_embd.weight");
  if (!embd) return NotFound(label + ": missing tensor 'token_embd.weight'");
  if (embd->ne.size() != 2 || embd->ne[0] != hidden) {
    return InvalidArgument(label + ": tensor 'token_embd.weight' has ne " + ShapeStr(embd->ne) +
                           ", expected [" + std::to_string(hidden) + ", vocab]");
  }
  c["vocab_size"] = embd->ne[1];
  c["hidden_size"] = hidden;
  c["intermediate_size"] = ffn;
  c["num_hidden_layers"] = layers;
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = kv_heads;
  if (head_dim > 0) c["head_dim"] = head_dim;
  c["max_position_embeddings"] = ctx;
  c["rope_theta"] = theta;
  c["rms_norm_eps"] = eps;
  c["tie_word_embeddings"] = g.FindTensor("output.weight") == nullptr;
  c["torch_dtype"] = "gguf";
  const bool q_bias = g.FindTensor("blk.0.attn_q.bias") != nullptr;
  if (arch == "qwen2moe") {
    c["qkv_bias"] = q_bias;
  } else if (arch != "qwen2") {
    c["attention_bias"] = q_bias;
  }
  if (!deepseek) RETURN_IF_ERROR(GgufMoeConfig(g, m, arch, layers, &c));
  if (arch == "llama") c["mlp_bias"] = g.FindTensor("blk.0.ffn_gate.bias") != nullptr;
  if (const GgufValue* v = g.Find("tokenizer.ggml.bos_token_id"); v && v->AsInt()) c["bos_token_id"] = *v->AsInt();
  if (const GgufValue* v = g.Find("tokenizer.ggml.eos_token_id"); v && v->AsInt()) c["eos_token_id"] = *v->AsInt();

  // Rope scaling.
  ASSIGN_OR_RETURN(std::string scaling, m.Str(p + "rope.scaling.type", std::string("none")));
  if (scaling == "linear" || scaling == "yarn") {
    ASSIGN_OR_RETURN(double factor, m.Num(p + "rope.scaling.factor"));
    json s = {{"rope_type", scaling}, {"factor", factor}};
    if (scaling == "yarn") {
      ASSIGN_OR_RETURN(int64_t orig, m.Int(p + "rope.scaling.original_context_length", ctx));
      s["original_max_position_embeddings"] = orig;
      ASSIGN_OR_RETURN(double bf, m.Num(p + "rope.scaling.yarn_beta_fast", 32.0));
      ASSIGN_OR_RETURN(double bs, m.Num(p + "rope.scaling.yarn_beta_slow", 1.0));
      s["beta_fast"] = bf;
      s["beta_slow"] = bs;
      // gpt-oss's YaRN does not round the correction range (HF truncate: false; llama.cpp
      // has no key for it and rounds, a difference only its speed baseline inherits).
      if (arch == "gpt-oss") s["truncate"] = false;
    }
    c["rope_scaling"] = s;
  } else if (scaling != "none") {
    return Unimplemented(label + ": metadata '" + p + "rope.scaling.type' value '" + scaling +
                         "' is not supported (none, linear, yarn)");
  }
  if (const GgufTensor* rf = g.FindTensor("rope_freqs.weight")) {
    const int64_t hd = head_dim > 0 ? head_dim : hidden / heads;
    json s;
    RETURN_IF_ERROR(RopeFreqsToScaling(*rf, theta, hd, label, &s));
    if (!s.is_null()) c["rope_scaling"] = s;
  }
  if (arch == "phi3") RETURN_IF_ERROR(GgufPhi3Config(g, m, head_dim > 0 ? head_dim : hidden / heads, ctx, &c));
  ASSIGN_OR_RETURN(int64_t window, m.Int(p + "attention.sliding_window", 0));
  if (arch == "gpt-oss" && window > 0) c["sliding_window"] = window;  // on even layers (llama.cpp: swa pattern 2)
  if (window > 0 && arch == "llama") {
    // Same weights; window on every layer (Mixtral keeps its architecture).
    if (!c.contains("num_local_experts")) c["architectures"] = {"MistralForCausalLM"};
    c["sliding_window"] = window;
  }
  if (arch == "gemma2" || arch == "gemma3") {
    RETURN_IF_ERROR(GgufGemmaConfig(m, arch, layers, hidden, heads, head_dim, theta, &c));
  }
  if (deepseek) RETURN_IF_ERROR(GgufDeepseekConfig(g, m, &c));
  ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(c.dump(), label));
  config.model_type = arch;
  config.norm_weight_offset = 0.0;  // GGUF Gemma norms hold 1 + w already
  config.o_bias = g.FindTensor("blk.0.attn_output.bias") != nullptr;
  return config;
}

namespace {

// The keys GgufGemmaConfig reads, as llama.cpp's converter writes them.
void AppendGemmaMetadata(const ModelConfig& c, const std::string& p,
                         std::vector<std::pair<std::string, GgufValue>>* md) {
  int64_t window = 0;
  std::vector<GgufValue> sliding;
  for (int64_t w : c.layer_sliding_window) {
    window = std::max(window, w);
    sliding.push_back(GgufValue::Bool(w > 0));
  }
  if (window > 0) {
    md->emplace_back(p + "attention.sliding_window", GgufValue::U32(static_cast<uint32_t>(window)));
    md->emplace_back(p + "attention.sliding_window_pattern", GgufValue::Array(GgufType::kBool, std::move(sliding)));
  }
  if (c.attn_logit_softcapping > 0) {
    md->emplace_back(p + "attn_logit_softcapping", GgufValue::F32(static_cast<float>(c.attn_logit_softcapping)));
  }
  if (c.final_logit_softcapping > 0) {
    md->emplace_back(p + "final_logit_softcapping", GgufValue::F32(static_cast<float>(c.final_logit_softcapping)));
  }
  if (c.rope_local_theta > 0) {
    md->emplace_back(p + "rope.freq_base_swa", GgufValue::F32(static_cast<float>(c.rope_local_theta)));
  }
}

}  // namespace

std::vector<std::pair<std::string, GgufValue>> GgufModelMetadata(const ModelConfig& c, const std::string& arch,
                                                                 const std::string& name) {
  std::vector<std::pair<std::string, GgufValue>> md;
  const std::string p = arch + ".";
  auto u32 = [](int64_t v) { return GgufValue::U32(static_cast<uint32_t>(v)); };
  md.emplace_back("general.architecture", GgufValue::Str(arch));
  md.emplace_back("general.name", GgufValue::Str(name));
  md.emplace_back(p + "block_count", u32(c.num_layers));
  md.emplace_back(p + "context_length", u32(c.max_position_embeddings));
  md.emplace_back(p + "embedding_length", u32(c.hidden_size));
  md.emplace_back(p + "feed_forward_length", u32(c.intermediate_size));
  md.emplace_back(p + "attention.head_count", u32(c.num_q_heads));
  md.emplace_back(p + "attention.head_count_kv", u32(c.num_kv_heads));
  if (arch == "deepseek2") {
    AppendDeepseekMetadata(c, &md);  // MLA's lengths and DeepSeekMoE's keys
  } else {
    md.emplace_back(p + "attention.key_length", u32(c.head_dim));
    md.emplace_back(p + "attention.value_length", u32(c.head_dim));
  }
  md.emplace_back(p + "rope.freq_base", GgufValue::F32(static_cast<float>(c.rope_theta)));
  md.emplace_back(p + "attention.layer_norm_rms_epsilon", GgufValue::F32(static_cast<float>(c.rms_norm_eps)));
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScalingType::kLinear || s.type == RopeScalingType::kYarn) {
    md.emplace_back(p + "rope.scaling.type", GgufValue::Str(s.type == RopeScalingType::kLinear ? "linear" : "yarn"));
    md.emplace_back(p + "rope.scaling.factor", GgufValue::F32(static_cast<float>(s.factor)));
    if (s.type == RopeScalingType::kYarn) {
      md.emplace_back(p + "rope.scaling.original_context_length", u32(s.original_max_position_embeddings));
    }
  }
  if (c.is_moe() && arch != "deepseek2") {
    md.emplace_back(p + "expert_count", u32(c.moe.num_experts));
    md.emplace_back(p + "expert_used_count", u32(c.moe.top_k));
    if (arch != "llama") {
      md.emplace_back(p + "expert_feed_forward_length", u32(c.moe.expert_inter));
      md.emplace_back(p + "expert_weights_norm", GgufValue::Bool(c.moe.norm_topk_prob));
    }
    if (c.moe.shared_inter > 0) md.emplace_back(p + "expert_shared_feed_forward_length", u32(c.moe.shared_inter));
  }
  for (int64_t w : c.layer_sliding_window) {
    if (w > 0 && (arch == "llama" || arch == "phi3" || arch == "gpt-oss")) {
      md.emplace_back(p + "attention.sliding_window", u32(w));
      break;
    }
  }
  if (arch == "phi3") {
    md.emplace_back(p + "rope.dimension_count", u32(c.rotary_dim));
    if (s.type == RopeScalingType::kLongRope) {
      md.emplace_back(p + "rope.scaling.original_context_length", u32(s.original_max_position_embeddings));
      md.emplace_back(p + "rope.scaling.attn_factor",
                      GgufValue::F32(static_cast<float>(ComputeRopeFrequencies(c).attention_factor)));
    }
  }
  if (arch == "gemma2" || arch == "gemma3") AppendGemmaMetadata(c, p, &md);
  return md;
}

std::string GgufTensorName(const WeightSpec& spec, const std::string& arch) {
  using R = WeightRole;
  const std::string b = "blk." + std::to_string(spec.layer) + ".";
  switch (spec.role) {
    case R::kEmbed: return "token_embd.weight";
    case R::kLmHead: return "output.weight";
    case R::kFinalNorm: return "output_norm.weight";
    case R::kInputNorm: return b + "attn_norm.weight";
    case R::kPostNorm: return b + (arch == "gpt-oss" ? "post_attention_norm.weight" : "ffn_norm.weight");
    case R::kQNorm: return b + "attn_q_norm.weight";
    case R::kKNorm: return b + "attn_k_norm.weight";
    // Phi-3: q/k/v fused as attn_qkv; gate/up fused as ffn_up ([gate | up] rows).
    case R::kQ: return b + (spec.stored_rows > 0 ? "attn_qkv.weight" : "attn_q.weight");
    case R::kK: return b + (spec.stored_rows > 0 ? "attn_qkv.weight" : "attn_k.weight");
    case R::kV: return b + (spec.stored_rows > 0 ? "attn_qkv.weight" : "attn_v.weight");
    case R::kO: return b + "attn_output.weight";
    case R::kQBias: return b + "attn_q.bias";
    case R::kKBias: return b + "attn_k.bias";
    case R::kVBias: return b + "attn_v.bias";
    case R::kOBias: return b + "attn_output.bias";
    case R::kGate: return b + (spec.stored_rows > 0 ? "ffn_up.weight" : "ffn_gate.weight");
    case R::kUp: return b + "ffn_up.weight";
    case R::kDown: return b + "ffn_down.weight";
    case R::kGateBias: return b + "ffn_gate.bias";
    case R::kUpBias: return b + "ffn_up.bias";
    case R::kDownBias: return b + "ffn_down.bias";
    case R::kAttnOutNorm: return b + "post_attention_norm.weight";
    case R::kFfnOutNorm: return b + "post_ffw_norm.weight";
    case R::kQA: return b + "attn_q_a.weight";  // MLA (llama.cpp deepseek2 names)
    case R::kQANorm: return b + "attn_q_a_norm.weight";
    case R::kQB: return b + "attn_q_b.weight";
    case R::kKvA: return b + "attn_kv_a_mqa.weight";
    case R::kKvANorm: return b + "attn_kv_a_norm.weight";
    case R::kKvB: return b + "attn_kv_b.weight";
    case R::kRouter: return b + "ffn_gate_inp.weight";
    case R::kExpertGate: return b + "ffn_gate_exps.weight";  // all experts stacked [E, inter, h]
    case R::kExpertUp: return b + "ffn_up_exps.weight";
    case R::kExpertDown: return b + "ffn_down_exps.weight";
    case R::kSharedGate: return b + "ffn_gate_shexp.weight";
    case R::kSharedUp: return b + "ffn_up_shexp.weight";
    case R::kSharedDown: return b + "ffn_down_shexp.weight";
    case R::kSharedExpertGate: return b + "ffn_gate_inp_shexp.weight";
    case R::kSinks: return b + "attn_sinks.weight";
    case R::kRouterBias: return b + "ffn_gate_inp.bias";
    case R::kExpertGateBias: return b + "ffn_gate_exps.bias";  // all experts stacked [E, inter]
    case R::kExpertUpBias: return b + "ffn_up_exps.bias";
    case R::kExpertDownBias: return b + "ffn_down_exps.bias";
    case R::kScoreBias: return b + "exp_probs_b.bias";  // DeepSeek-V3 e_score_correction_bias
  }
  return "";
}

void PermuteQkRows(const uint8_t* src, uint8_t* dst, int64_t n_head, int64_t rows, int64_t row_bytes,
                   bool to_gguf) {
  const int64_t hd = rows / n_head, half = hd / 2;
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t j = 0; j < 2; ++j) {
      for (int64_t i = 0; i < half; ++i) {
        const int64_t hf = h * hd + j * half + i;  // HF rotate-half row
        const int64_t gg = h * hd + 2 * i + j;     // llama.cpp interleaved row
        const int64_t from = to_gguf ? hf : gg, to = to_gguf ? gg : hf;
        std::memcpy(dst + to * row_bytes, src + from * row_bytes, row_bytes);
      }
    }
  }
}

StatusOr<std::unique_ptr<GgufWeightSource>> GgufWeightSource::Open(const std::string& path, ModelConfig* config) {
  auto s = std::unique_ptr<GgufWeightSource>(new GgufWeightSource());
  ASSIGN_OR_RETURN(s->file_, GgufFile::Open(path));
  ASSIGN_OR_RETURN(s->config_, GgufModelConfig(s->file_->contents(), path));
  s->arch_ = s->config_.model_type;
  *config = s->config_;
  return s;
}

StatusOr<SourceTensor> GgufWeightSource::Get(const WeightSpec& spec) {
  const std::string name = GgufTensorName(spec, arch_);
  const std::string& path = file_->path();
  const GgufTensor* t = file_->contents().FindTensor(name);
  if (!t && spec.role == WeightRole::kKvB && arch_ == "deepseek2") {  // split into attn_k_b / attn_v_b
    std::vector<uint8_t> kv_b;
    DType dtype = DType::kF32;
    RETURN_IF_ERROR(GgufDeepseekKvB(file_->contents(), config_, spec.layer, path, &kv_b, &dtype));
    auto buf = std::make_unique<uint8_t[]>(kv_b.size());
    std::memcpy(buf.get(), kv_b.data(), kv_b.size());
    owned_.push_back(std::move(buf));
    return SourceTensor{owned_.back().get(), dtype, static_cast<int64_t>(kv_b.size()), path};
  }
  if (!t) return NotFound(path + ": missing tensor '" + name + "' (for " + spec.name + ")");
  if (spec.IsExpert()) {
    // One expert's [rows, cols] (or bias [rows]) slice of the stacked [n_expert, rows, cols] tensor.
    std::vector<int64_t> want = {config_.moe.num_experts};
    want.insert(want.end(), spec.shape.begin(), spec.shape.end());
    if (spec.shape.size() == 1 && IsQuantized(t->dtype)) {
      return Unimplemented(path + ": tensor '" + name + "' is quantized; expert biases must be F32, F16 or BF16");
    }
    if (t->shape() != want) {
      return InvalidArgument(path + ": tensor '" + name + "' has shape " + ShapeStr(t->shape()) + " (ne " +
                             ShapeStr(t->ne) + "), expected " + ShapeStr(want));
    }
    const uint64_t per_expert = t->nbytes / static_cast<uint64_t>(want[0]);
    return SourceTensor{t->data + per_expert * spec.expert, t->dtype, static_cast<int64_t>(per_expert), path};
  }
  // llama.cpp declares ffn_gate_inp_shexp as [n_embd]; converters write [1, n_embd] or [n_embd].
  const bool shexp_vector = spec.role == WeightRole::kSharedExpertGate && t->shape() == std::vector{spec.shape[1]};
  if (t->shape() != spec.StoredShape() && !shexp_vector) {
    return InvalidArgument(path + ": tensor '" + name + "' has shape " + ShapeStr(t->shape()) + " (ne " +
                           ShapeStr(t->ne) + "), expected " + ShapeStr(spec.StoredShape()));
  }
  if (spec.shape.size() == 1 && IsQuantized(t->dtype)) {
    return Unimplemented(path + ": tensor '" + name + "' is a vector in " + std::string(GgmlTypeName(t->ggml_type)) +
                         "; vectors must be F32, F16 or BF16");
  }
  SourceTensor out = FusedPart(spec, {t->data, t->dtype, static_cast<int64_t>(t->nbytes), path});
  using R = WeightRole;
  const bool q = spec.role == R::kQ || spec.role == R::kQBias;
  const bool k = spec.role == R::kK || spec.role == R::kKBias;
  if (GgufPermutesQk(arch_) && (q || k)) {
    const int64_t rows = spec.shape[0];
    const int64_t row_bytes = out.bytes / rows;
    auto buf = std::make_unique<uint8_t[]>(static_cast<size_t>(out.bytes));
    PermuteQkRows(static_cast<const uint8_t*>(out.data), buf.get(), q ? config_.num_q_heads : config_.num_kv_heads,
                  rows, row_bytes, false);
    out.data = buf.get();
    owned_.push_back(std::move(buf));
  }
  return out;
}

}  // namespace tessera
