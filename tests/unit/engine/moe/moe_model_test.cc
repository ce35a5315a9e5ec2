// MoE models end to end in the engine: safetensors and GGUF twins agree,
// quantized experts load, bad checkpoints fail naming the tensor or field,
// recompute after preemption is bitwise exact, and expert load is counted.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <sstream>

#include "engine/batch_builder.h"
#include "engine/gguf.h"
#include "engine/gguf_deepseek.h"
#include "engine/gguf_model.h"
#include "engine/safetensors.h"
#include "engine/model.h"
#include "engine/synth.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

SynthOptions Synth(const std::string& out, const std::string& arch, DType dtype, const std::string& format) {
  SynthOptions o;
  o.arch = arch;
  o.dtype = dtype;
  o.format = format;
  o.out_dir = out;
  return o;
}

// Logits of one prefill of `tokens` (rows at every position) and the model's expert load.
struct PrefillRun {
  std::vector<float> logits;
  ExpertLoad load;
};

PrefillRun Prefill(const std::string& path, const std::vector<int32_t>& tokens, int threads = 1) {
  auto backend = MakeCpuBackend({threads});
  auto m = Model::Load(path, backend.get());
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (!m.ok()) return {};
  auto cache = (*m)->CreateKvCache(8, 16);
  EXPECT_TRUE(cache.ok());
  BatchBuilder bb(8, 16);
  BatchBuilder::Chunk c;
  c.seq = bb.AddSequence();
  c.tokens = tokens;
  c.logits_at.resize(tokens.size());
  std::iota(c.logits_at.begin(), c.logits_at.end(), 0);
  auto batch = bb.Build({c});
  EXPECT_TRUE(batch.ok());
  PrefillRun r;
  EXPECT_TRUE((*m)->Forward(*batch, cache->get(), &r.logits).ok());
  auto load = (*m)->ReadExpertLoad();
  EXPECT_TRUE(load.ok());
  r.load = *load;
  return r;
}

const std::vector<int32_t> kTokens = {1, 500, 20000, 77, 9, 4242, 31, 100};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// Replaces the first occurrence of `from` (same length as `to`) in the file.
void Patch(const std::string& path, const std::string& from, const std::string& to) {
  std::string b = ReadAll(path);
  const size_t at = b.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  b.replace(at, from.size(), to);
  WriteAll(path, b);
}

// Sets a u32 metadata value of a GGUF file in place.
void PatchGgufU32(const std::string& path, const std::string& key, uint32_t v) {
  std::string b = ReadAll(path);
  const size_t at = b.find(key);
  ASSERT_NE(at, std::string::npos) << key;
  std::memcpy(&b[at + key.size() + 4], &v, 4);  // skip the u32 value type
  WriteAll(path, b);
}

std::string LoadError(const std::string& path) {
  auto backend = MakeCpuBackend({1});
  auto m = Model::Load(path, backend.get());
  return m.ok() ? "loaded" : m.status().ToString();
}

class MoeModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (FindNpmDir().empty()) GTEST_SKIP() << "no tokenizer packages (scripts/bootstrap)";
  }
  TempDir tmp_;
};

TEST_P(MoeModelTest, SafetensorsAndGgufTwinsGiveIdenticalLogits) {
  for (DType d : {DType::kF32, DType::kBF16}) {
    const std::string dir = tmp_.path() + "/m" + std::string(DTypeName(d));
    ASSERT_TRUE(WriteSyntheticCheckpoint(Synth(dir, GetParam(), d, "both")).ok());
    const PrefillRun a = Prefill(dir, kTokens), b = Prefill(SynthGgufPath(dir), kTokens, 2);
    ASSERT_FALSE(a.logits.empty());
    EXPECT_TRUE(a.logits == b.logits) << GetParam() << " " << DTypeName(d);
    // Every (token, slot) pair counted once per MoE layer, identically.
    ASSERT_FALSE(a.load.empty());
    EXPECT_EQ(a.load.counts, b.load.counts);
    const int64_t total = std::accumulate(a.load.counts.begin(), a.load.counts.end(), int64_t{0});
    EXPECT_EQ(total, static_cast<int64_t>(kTokens.size()) * 2 * static_cast<int64_t>(a.load.layers.size()));
  }
}

// DeepSeek-V3 layout (MLA with q_lora, sigmoid noaux_tc routing with the correction bias,
// a shared expert) from HF safetensors and from a GGUF deepseek2 file holding the same
// values under llama.cpp's names and keys, kv_b split into attn_k_b / attn_v_b as current
// converters write it. The file is assembled here: synth's GGUF writer needs a llama.cpp
// pre-tokenizer name for DeepSeek-V3's multi-regex tokenizer, which GGUF vocabularies
// do not carry yet. Same logits bit for bit, same routing.
TEST_F(MoeModelTest, DeepseekV3GgufDeepseek2GivesTheSafetensorsLogits) {
  const std::string dir = tmp_.path() + "/ds";
  SynthOptions o = Synth(dir, "deepseek_v3", DType::kF32, "safetensors");
  o.overrides = {"vocab_size=32768"};
  ASSERT_TRUE(WriteSyntheticCheckpoint(o).ok());
  auto cfg = LoadModelConfig(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto store = WeightStore::Open(dir);
  ASSERT_TRUE(store.ok());
  auto bytes_of = [&](const WeightSpec& spec) {
    const SafetensorsTensor* t = (*store)->Find(spec.name);
    EXPECT_NE(t, nullptr) << spec.name;
    return t ? std::vector<uint8_t>(t->data, t->data + (t->end - t->begin)) : std::vector<uint8_t>();
  };
  std::vector<GgufTensorToWrite> tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, std::vector<uint8_t> v) {
    auto data = std::make_shared<std::vector<uint8_t>>(std::move(v));
    tensors.push_back({name, DType::kF32, std::move(shape), [data](uint8_t* dst) {
                         std::memcpy(dst, data->data(), data->size());
                       }});
  };
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<uint8_t>>> stacked;  // experts
  for (const WeightSpec& spec : ExpectedWeights(*cfg)) {
    const std::string name = GgufTensorName(spec, "deepseek2");
    std::vector<uint8_t> v = bytes_of(spec);
    if (spec.role == WeightRole::kKvB) {
      const int64_t H = cfg->num_q_heads, r = cfg->mla.kv_lora_rank, n = cfg->mla.qk_nope_head_dim;
      std::vector<uint8_t> kb(H * r * n * 4), vb(H * cfg->mla.v_head_dim * r * 4);
      SplitDeepseekKvB(v.data(), *cfg, 4, kb.data(), vb.data());
      const std::string b = "blk." + std::to_string(spec.layer) + ".";
      add(b + "attn_k_b.weight", {H, r, n}, std::move(kb));
      add(b + "attn_v_b.weight", {H, cfg->mla.v_head_dim, r}, std::move(vb));
    } else if (spec.IsExpert()) {
      auto& [shape, all] = stacked[name];
      shape = {spec.expert + 1, spec.shape[0], spec.shape[1]};
      all.insert(all.end(), v.begin(), v.end());
    } else {
      add(name, spec.shape, std::move(v));
    }
  }
  for (auto& [name, sv] : stacked) add(name, sv.first, std::move(sv.second));
  const std::string gguf = tmp_.path() + "/ds.gguf";
  ASSERT_TRUE(WriteGguf(gguf, GgufModelMetadata(*cfg, "deepseek2", "t"), tensors).ok());
  auto file = GgufFile::Open(gguf);
  ASSERT_TRUE(file.ok());
  auto g = GgufModelConfig((*file)->contents(), "t");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->architecture, "DeepseekV3ForCausalLM");
  EXPECT_EQ(g->moe.topk_method, MoeTopkMethod::kNoauxTc);
  EXPECT_EQ(g->moe.shared_inter, cfg->moe.shared_inter);
  // GGUF stores 0.1 * mscale_all_dim as an f32, so the f64 scale differs in its last
  // bits; the f32 scale the attention kernels use is the same.
  EXPECT_EQ(static_cast<float>(g->attn_scale), static_cast<float>(cfg->attn_scale));
  const PrefillRun a = Prefill(dir, kTokens), b = Prefill(gguf, kTokens, 2);
  ASSERT_FALSE(a.logits.empty());
  EXPECT_TRUE(a.logits == b.logits);
  EXPECT_EQ(a.load.counts, b.load.counts);
}

TEST_P(MoeModelTest, QuantizedExpertsLoadAndStayClose) {
  // hidden and expert widths of 256 so Q4_K experts are really Q4_K (whole blocks).
  std::vector<std::string> sets = {"hidden_size=256"};
  sets.push_back(GetParam() == "mixtral" ? "intermediate_size=256" : "moe_intermediate_size=256");
  SynthOptions ref = Synth(tmp_.path() + "/ref", GetParam(), DType::kF32, "safetensors");
  ref.overrides = sets;
  ASSERT_TRUE(WriteSyntheticCheckpoint(ref).ok());
  const PrefillRun base = Prefill(ref.out_dir, kTokens);
  // Relative RMS error of the logits: ~1% for 8-bit (so every expert slice of
  // the stacked tensors is the right one: a wrong slice gives ~1.4); 4-bit
  // noise also flips some routing choices, which moves those tokens further.
  auto rel_err = [&](const std::string& path) {
    const PrefillRun q = Prefill(path, kTokens, 2);
    EXPECT_EQ(q.logits.size(), base.logits.size());
    if (q.logits.size() != base.logits.size()) return 1e9;
    double err = 0, norm = 0;
    for (size_t i = 0; i < q.logits.size(); ++i) {
      err += (q.logits[i] - base.logits[i]) * (q.logits[i] - base.logits[i]);
      norm += base.logits[i] * base.logits[i];
    }
    return std::sqrt(err / norm);
  };
  for (DType d : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K}) {
    SynthOptions o = Synth(tmp_.path() + "/q" + std::string(DTypeName(d)) + ".gguf", GetParam(), d, "gguf");
    o.overrides = sets;
    ASSERT_TRUE(WriteSyntheticCheckpoint(o).ok());
    auto file = GgufFile::Open(o.out_dir);
    ASSERT_TRUE(file.ok());
    const GgufTensor* t = (*file)->contents().FindTensor("blk.1.ffn_down_exps.weight");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, d);
    EXPECT_EQ(t->ne.size(), 3u);
    EXPECT_LT(rel_err(o.out_dir), d == DType::kQ8_0 ? 0.03 : 0.6) << DTypeName(d);
  }
  // llama-quantize's Q4_K_M recipe: Q4_K experts whose ffn_down has more bits (Q6_K)
  // in some layers, so a layer's projections differ in type. The GGUF expert tensors
  // and the kernel are the same for every MoE arch: one arch pays the time.
  if (GetParam() != "qwen3_moe") return;
  SynthOptions mix = Synth(tmp_.path() + "/q4_k_m.gguf", GetParam(), DType::kQ4_K, "gguf");
  mix.llama_ftype = 15;  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  mix.overrides = sets;
  ASSERT_TRUE(WriteSyntheticCheckpoint(mix).ok());
  auto file = GgufFile::Open(mix.out_dir);
  ASSERT_TRUE(file.ok());
  int mixed_layers = 0;
  for (int l = 0;; ++l) {
    const GgufTensor* g = (*file)->contents().FindTensor("blk." + std::to_string(l) + ".ffn_gate_exps.weight");
    const GgufTensor* dn = (*file)->contents().FindTensor("blk." + std::to_string(l) + ".ffn_down_exps.weight");
    if (g == nullptr || dn == nullptr) break;
    mixed_layers += g->dtype != dn->dtype;
  }
  EXPECT_GT(mixed_layers, 0) << "the recipe should give some layer's ffn_down_exps another type";
  EXPECT_LT(rel_err(mix.out_dir), 0.6);
}

TEST_P(MoeModelTest, RecomputeAfterPreemptionIsBitwiseExact) {
  // A preempted sequence is recomputed as one prefill of prompt + generated
  // tokens; its next logits must equal those of the uninterrupted run.
  const std::string dir = tmp_.path() + "/m";
  ASSERT_TRUE(WriteSyntheticCheckpoint(Synth(dir, GetParam(), DType::kBF16, "safetensors")).ok());
  auto backend = MakeCpuBackend({2});
  auto m = Model::Load(dir, backend.get());
  ASSERT_TRUE(m.ok());
  const int64_t vocab = (*m)->config().vocab_size;
  auto greedy = [&](const std::vector<std::vector<int32_t>>& steps) {
    // Feeds each chunk in turn to one sequence; returns the logits after the last.
    auto cache = (*m)->CreateKvCache(8, 16);
    BatchBuilder bb(8, 16);
    const int s = bb.AddSequence();
    std::vector<float> logits;
    for (const auto& toks : steps) {
      BatchBuilder::Chunk c;
      c.seq = s;
      c.tokens = toks;
      c.logits_at = {static_cast<int>(toks.size()) - 1};
      auto b = bb.Build({c});
      EXPECT_TRUE(b.ok());
      EXPECT_TRUE((*m)->Forward(*b, cache->get(), &logits).ok());
    }
    return logits;
  };
  std::vector<std::vector<int32_t>> steps = {kTokens};
  std::vector<int32_t> generated;
  std::vector<float> last;
  for (int i = 0; i < 4; ++i) {
    last = greedy(steps);
    const int32_t next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    ASSERT_LT(next, vocab);
    generated.push_back(next);
    steps.push_back({next});
  }
  const std::vector<float> uninterrupted = greedy(steps);
  std::vector<int32_t> all = kTokens;
  all.insert(all.end(), generated.begin(), generated.end());
  EXPECT_TRUE(greedy({all}) == uninterrupted) << "recompute in one prefill";
  EXPECT_TRUE(greedy({std::vector<int32_t>(all.begin(), all.begin() + 5),
                      std::vector<int32_t>(all.begin() + 5, all.end())}) == uninterrupted)
      << "recompute in two chunks";
}

INSTANTIATE_TEST_SUITE_P(Archs, MoeModelTest, ::testing::Values("mixtral", "qwen2_moe", "qwen3_moe"));

class MoeLoadErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (FindNpmDir().empty()) GTEST_SKIP() << "no tokenizer packages (scripts/bootstrap)";
  }
  TempDir tmp_;
};

TEST_F(MoeLoadErrorTest, SafetensorsMissingExpertWrongShapeWrongRouter) {
  const std::string dir = tmp_.path() + "/q2";
  ASSERT_TRUE(WriteSyntheticCheckpoint(Synth(dir, "qwen2_moe", DType::kBF16, "safetensors")).ok());
  const std::string config = ReadAll(dir + "/config.json");
  // An expert tensor renamed away: the missing one is named.
  Patch(dir + "/model.safetensors", "layers.1.mlp.experts.3.up_proj", "layers.1.mlp.experts.3.up_prox");
  std::string e = LoadError(dir);
  EXPECT_NE(e.find("model.layers.1.mlp.experts.3.up_proj.weight"), std::string::npos) << e;
  Patch(dir + "/model.safetensors", "layers.1.mlp.experts.3.up_prox", "layers.1.mlp.experts.3.up_proj");
  EXPECT_EQ(LoadError(dir), "loaded");
  // Experts narrower than the config says.
  WriteAll(dir + "/config.json", std::string(config).replace(config.find("\"moe_intermediate_size\": 32"),
                                                             26, "\"moe_intermediate_size\": 16"));
  e = LoadError(dir);
  EXPECT_NE(e.find("model.layers.0.mlp.experts.0.gate_proj.weight"), std::string::npos) << e;
  // More experts than the router has rows.
  WriteAll(dir + "/config.json", std::string(config).replace(config.find("\"num_experts\": 8"), 16,
                                                             "\"num_experts\": 9"));
  e = LoadError(dir);
  EXPECT_NE(e.find("model.layers.0.mlp.gate.weight"), std::string::npos) << e;
  // More experts per token than experts.
  WriteAll(dir + "/config.json", std::string(config).replace(config.find("\"num_experts_per_tok\": 2"), 24,
                                                             "\"num_experts_per_tok\": 9"));
  e = LoadError(dir);
  EXPECT_NE(e.find("'num_experts_per_tok' (9) must be <= 'num_experts' (8)"), std::string::npos) << e;
}

TEST_F(MoeLoadErrorTest, GgufWrongStackedShapeRouterAndKeys) {
  const std::string path = tmp_.path() + "/m.gguf";
  ASSERT_TRUE(WriteSyntheticCheckpoint(Synth(path, "qwen3_moe", DType::kBF16, "gguf")).ok());
  const std::string good = ReadAll(path);
  EXPECT_EQ(LoadError(path), "loaded");
  PatchGgufU32(path, "qwen3moe.expert_feed_forward_length", 16);
  std::string e = LoadError(path);
  EXPECT_NE(e.find("blk.0.ffn_gate_exps.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("expected [8, 16, 64]"), std::string::npos) << e;
  WriteAll(path, good);
  PatchGgufU32(path, "qwen3moe.expert_count", 9);
  e = LoadError(path);
  EXPECT_NE(e.find("blk.0.ffn_gate_inp.weight"), std::string::npos) << e;
  WriteAll(path, good);
  PatchGgufU32(path, "qwen3moe.expert_used_count", 9);
  e = LoadError(path);
  EXPECT_NE(e.find("'qwen3moe.expert_used_count' must be in [1, expert_count = 8]"), std::string::npos) << e;
  // A missing stacked expert tensor is named.
  WriteAll(path, good);
  Patch(path, "blk.1.ffn_up_exps.weight", "blk.1.ffn_up_exps.weighX");
  e = LoadError(path);
  EXPECT_NE(e.find("missing tensor 'blk.1.ffn_up_exps.weight'"), std::string::npos) << e;
}

TEST_F(MoeLoadErrorTest, RouterSkewMakesTheFirstExpertsHot) {
  SynthOptions o = Synth(tmp_.path() + "/skew", "qwen3_moe", DType::kF32, "safetensors");
  o.router_skew = 4.0;
  ASSERT_TRUE(WriteSyntheticCheckpoint(o).ok());
  std::vector<int32_t> tokens;
  for (int i = 0; i < 64; ++i) tokens.push_back(1000 + 37 * i);
  const PrefillRun r = Prefill(o.out_dir, tokens);
  ASSERT_EQ(r.load.num_experts, 8);
  // Share of the (token, slot) pairs that go to experts 0 and 1 (the top_k = 2
  // skewed router rows), per layer.
  auto hot_share = [](const ExpertLoad& load) {
    std::vector<double> share;
    for (size_t l = 0; l < load.layers.size(); ++l) {
      const int64_t* c = &load.counts[l * load.num_experts];
      const int64_t total = std::accumulate(c, c + load.num_experts, int64_t{0});
      share.push_back(static_cast<double>(c[0] + c[1]) / static_cast<double>(total));
    }
    return share;
  };
  const std::vector<double> skewed = hot_share(r.load);
  o.router_skew = 0.0;
  o.out_dir = tmp_.path() + "/flat";
  ASSERT_TRUE(WriteSyntheticCheckpoint(o).ok());
  const std::vector<double> flat = hot_share(Prefill(o.out_dir, tokens).load);
  ASSERT_EQ(skewed.size(), 2u);
  ASSERT_EQ(flat.size(), 2u);
  // Most of layer 0's pairs; deeper the residual dilutes the shared direction.
  EXPECT_GT(skewed[0], 0.6);
  for (size_t l = 0; l < 2; ++l) EXPECT_GT(skewed[l], flat[l] + 0.15) << "layer " << l << ": " << flat[l];
  o.arch = "qwen3";
  o.router_skew = 1.0;
  EXPECT_EQ(WriteSyntheticCheckpoint(o).code(), StatusCode::kInvalidArgument);
}

// gpt-oss, MXFP4 experts: the HF blocks/scales repacked at load and the GGUF's ggml blocks
// (llama.cpp's split ffn_{gate,up,down}_exps and their biases, post_attention_norm,
// attn_sinks) give identical logits (the f32 HF layout is checked against the NumPy
// reference); a scale tensor of the wrong shape and a missing sink are refused by name.
TEST_F(MoeLoadErrorTest, GptOssTwinsAndBadCheckpoints) {
  SynthOptions o = Synth(tmp_.path() + "/g", "gpt_oss", DType::kMXFP4, "both");
  o.overrides = {"vocab_size=32768"};  // the 201k head proves nothing here
  ASSERT_TRUE(WriteSyntheticCheckpoint(o).ok());
  const PrefillRun hf = Prefill(o.out_dir, kTokens), gguf = Prefill(SynthGgufPath(o.out_dir), kTokens, 2);
  ASSERT_FALSE(hf.logits.empty());
  EXPECT_TRUE(hf.logits == gguf.logits);
  EXPECT_EQ(hf.load.counts, gguf.load.counts);
  const std::string file = o.out_dir + "/model.safetensors", good = ReadAll(file);
  // Down scales [E, hidden, inter / 32] = [8, 64, 2] -> [8, 32, 4]: the same bytes, the wrong shape.
  Patch(file, R"("shape":[8,64,2])", R"("shape":[8,32,4])");
  std::string e = LoadError(o.out_dir);
  EXPECT_NE(e.find("'model.layers.0.mlp.experts.down_proj_scales' has shape [8, 32, 4], expected [8, 64, 2]"),
            std::string::npos) << e;
  WriteAll(file, good);
  Patch(file, "model.layers.0.self_attn.sinks", "model.layers.0.self_attn.sinkz");
  e = LoadError(o.out_dir);
  EXPECT_NE(e.find("missing tensor 'model.layers.0.self_attn.sinks'"), std::string::npos) << e;
}

}  // namespace
}  // namespace tessera
