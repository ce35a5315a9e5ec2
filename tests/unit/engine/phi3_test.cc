// Phi-3 / Phi-4 as data: config parsing (fused projections, window, partial
// rotary, LongRoPE fields validated), the LongRoPE tables and their one choice
// per deployment, and fused qkv_proj / gate_up_proj loaded as row ranges.
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/batch_builder.h"
#include "engine/gguf.h"
#include "engine/gguf_model.h"
#include "engine/model.h"
#include "engine/model_config.h"
#include "engine/rope.h"
#include "engine/synth.h"
#include "engine/weight_specs.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

using json = nlohmann::json;
using testing::MakeTinyModel;
using testing::RandomTokens;
using testing::TempDir;

// Phi-3.5-mini's shape of config, scaled down: head_dim 16, rotary 8 with the
// factor below, LongRoPE over an original context of 64.
json Phi3() {
  return {{"architectures", {"Phi3ForCausalLM"}},
          {"vocab_size", 1000},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"max_position_embeddings", 4096},
          {"original_max_position_embeddings", 64},
          {"sliding_window", 2047},
          {"partial_rotary_factor", 0.5},
          {"rope_scaling",
           {{"type", "longrope"}, {"short_factor", {1.0, 1.25, 1.5, 2.0}}, {"long_factor", {1.0, 2.0, 4.0, 8.0}}}}};
}

TEST(Phi3ConfigTest, TraitsAreData) {
  auto c = ParseModelConfig(Phi3().dump(), "c");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->fused_qkv);
  EXPECT_TRUE(c->fused_gate_up);
  EXPECT_FALSE(c->qkv_bias || c->o_bias || c->mlp_bias || c->qk_norm);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->rotary_dim, 8);
  EXPECT_EQ(c->layer_sliding_window, std::vector<int64_t>(2, 2047));  // every layer, as HF's Phi3Attention
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kLongRope);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 64);  // from the top level (Phi-3 configs)
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 4096.0 / 64.0);
  EXPECT_EQ(c->rope_scaling.long_factor, (std::vector<double>{1.0, 2.0, 4.0, 8.0}));
  // Phi-4-mini: head_dim 128, factor 0.75 -> 96 rotary dims; no rope scaling, no window.
  json p4 = Phi3();
  p4["hidden_size"] = 512;
  p4["partial_rotary_factor"] = 0.75;
  p4["rope_scaling"] = nullptr;
  p4.erase("sliding_window");
  auto c4 = ParseModelConfig(p4.dump(), "c");
  ASSERT_TRUE(c4.ok()) << c4.status().ToString();
  EXPECT_EQ(c4->rotary_dim, 96);
  EXPECT_EQ(c4->layer_sliding_window, std::vector<int64_t>(2, 0));
  // Fused tensors, as rows of one stored matrix.
  const std::vector<WeightSpec> w = ExpectedWeights(*c);
  int qkv = 0, gate_up = 0;
  for (const WeightSpec& s : w) {
    if (s.name == "model.layers.1.self_attn.qkv_proj.weight") {
      ++qkv;
      EXPECT_EQ(s.StoredShape(), (std::vector<int64_t>{64 + 2 * 32, 64}));
      EXPECT_EQ(s.row_offset, s.role == WeightRole::kQ ? 0 : s.role == WeightRole::kK ? 64 : 96);
    }
    if (s.name == "model.layers.0.mlp.gate_up_proj.weight") {
      ++gate_up;
      EXPECT_EQ(s.row_offset, s.role == WeightRole::kGate ? 0 : 96);
    }
    EXPECT_EQ(s.name.find("q_proj"), std::string::npos) << s.name;
  }
  EXPECT_EQ(qkv, 3);
  EXPECT_EQ(gate_up, 2);
}

TEST(Phi3ConfigTest, BadLongRopeAndPartialRotaryNameTheField) {
  struct Bad {
    std::function<void(json&)> mutate;
    std::string must_mention;
  };
  const std::vector<Bad> cases = {
      {[](json& j) { j["rope_scaling"]["short_factor"] = {1.0, 2.0}; }, "'short_factor' must be a list of 4"},
      {[](json& j) { j["rope_scaling"]["long_factor"] = {1.0, 2.0, -4.0, 8.0}; }, "'long_factor' entry 2"},
      {[](json& j) { j["rope_scaling"]["long_factor"] = {1.0, 2.0, 0.0, 8.0}; }, "'long_factor' entry 2"},
      {[](json& j) { j["rope_scaling"]["short_factor"] = {1.0, "x", 1.0, 1.0}; }, "'short_factor' entry 1"},
      {[](json& j) { j["rope_scaling"].erase("long_factor"); }, "'long_factor'"},
      {[](json& j) { j.erase("original_max_position_embeddings"); }, "'original_max_position_embeddings'"},
      {[](json& j) { j["rope_scaling"]["attention_factor"] = -1.0; }, "'attention_factor'"},
      {[](json& j) { j["partial_rotary_factor"] = 1.5; }, "'partial_rotary_factor'"},
      {[](json& j) { j["partial_rotary_factor"] = 0.01; }, "'partial_rotary_factor'"},
      {[](json& j) {  // the factors follow the rotary dims, not head_dim
         j["partial_rotary_factor"] = 1.0;
       },
       "'short_factor' must be a list of 8"},
      {[](json& j) { j["architectures"] = {"LlamaForCausalLM"}; }, "'partial_rotary_factor' must be 1"},
  };
  for (const Bad& b : cases) {
    json j = Phi3();
    b.mutate(j);
    auto c = ParseModelConfig(j.dump(), "m/config.json");
    ASSERT_FALSE(c.ok()) << b.must_mention;
    EXPECT_NE(c.status().message().find("m/config.json"), std::string::npos) << c.status().ToString();
    EXPECT_NE(c.status().message().find(b.must_mention), std::string::npos) << c.status().ToString();
  }
  json su = Phi3();
  su["rope_scaling"]["type"] = "su";  // Phi-3's first name for it
  EXPECT_TRUE(ParseModelConfig(su.dump(), "c").ok());
}

TEST(Phi3RopeTest, LongOrShortChosenOnceFromMaxModelLen) {
  const ModelConfig c = *ParseModelConfig(Phi3().dump(), "c");
  EXPECT_TRUE(UseLongRopeFactors(c, 0));  // 0: max_position_embeddings 4096 > 64
  EXPECT_TRUE(UseLongRopeFactors(c, 65));
  EXPECT_FALSE(UseLongRopeFactors(c, 64));
  const RopeFrequencies s = ComputeRopeFrequencies(c, 64), l = ComputeRopeFrequencies(c, 4096);
  ASSERT_EQ(s.inv_freq.size(), 4u);  // rotary dims / 2, base exponents over the rotary dims
  const double expect_af = std::sqrt(1.0 + std::log(4096.0 / 64.0) / std::log(64.0));
  for (int i = 0; i < 4; ++i) {
    const double base = 1.0 / std::pow(10000.0, 2.0 * i / 8.0);
    EXPECT_NEAR(s.inv_freq[i], base / c.rope_scaling.short_factor[i], 1e-15);
    EXPECT_NEAR(l.inv_freq[i], base / c.rope_scaling.long_factor[i], 1e-15);
  }
  // The attention factor depends on the model, not on which set is in use.
  EXPECT_NEAR(s.attention_factor, expect_af, 1e-15);
  EXPECT_NEAR(l.attention_factor, expect_af, 1e-15);
  json j = Phi3();
  j["rope_scaling"]["attention_factor"] = 1.25;
  EXPECT_DOUBLE_EQ(ComputeRopeFrequencies(*ParseModelConfig(j.dump(), "c"), 64).attention_factor, 1.25);
  j = Phi3();
  j["max_position_embeddings"] = 64;  // no extension: factor 1, attention factor 1
  EXPECT_DOUBLE_EQ(ComputeRopeFrequencies(*ParseModelConfig(j.dump(), "c")).attention_factor, 1.0);
  RopeTable t(c, 64);
  t.EnsurePositions(3);
  EXPECT_EQ(t.rot_dim(), 8);
  EXPECT_FLOAT_EQ(t.data()[2 * 8 + 1], static_cast<float>(std::cos(2.0 * s.inv_freq[1]) * expect_af));
}

// llama.cpp's phi3 layout: rope.dimension_count, the window, and LongRoPE as two
// f32 tensors plus the original context; a file with one factor tensor is refused.
TEST(Phi3GgufTest, MetadataRoundTripsAndAMissingFactorTensorIsNamed) {
  const ModelConfig c = *ParseModelConfig(Phi3().dump(), "c");
  std::vector<GgufTensorToWrite> tensors = {
      {"token_embd.weight", DType::kF32, {c.vocab_size, c.hidden_size},
       [n = c.vocab_size * c.hidden_size](uint8_t* d) { std::memset(d, 0, static_cast<size_t>(n) * 4); }}};
  for (const auto& [name, v] : GgufRopeFactorTensors(c)) {
    tensors.push_back({name, DType::kF32, {static_cast<int64_t>(v.size())},
                       [vals = v](uint8_t* d) { std::memcpy(d, vals.data(), vals.size() * 4); }});
  }
  ASSERT_EQ(tensors.size(), 3u);
  TempDir dir;
  const auto md = GgufModelMetadata(c, "phi3", "phi3 test");
  const std::string good = dir.path() + "/good.gguf";
  ASSERT_TRUE(WriteGguf(good, md, tensors).ok());
  auto f = GgufFile::Open(good);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto back = GgufModelConfig((*f)->contents(), good);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->fused_qkv && back->fused_gate_up);
  EXPECT_EQ(back->rotary_dim, 8);
  EXPECT_EQ(back->layer_sliding_window, c.layer_sliding_window);
  EXPECT_EQ(back->rope_scaling.type, RopeScalingType::kLongRope);
  EXPECT_EQ(back->rope_scaling.long_factor, c.rope_scaling.long_factor);
  EXPECT_EQ(back->rope_scaling.short_factor, c.rope_scaling.short_factor);
  EXPECT_EQ(back->rope_scaling.original_max_position_embeddings, 64);
  EXPECT_EQ(ComputeRopeFrequencies(*back).attention_factor, ComputeRopeFrequencies(c).attention_factor);
  tensors.pop_back();  // rope_factors_short.weight
  const std::string bad = dir.path() + "/bad.gguf";
  ASSERT_TRUE(WriteGguf(bad, md, tensors).ok());
  auto fb = GgufFile::Open(bad);
  ASSERT_TRUE(fb.ok());
  auto refused = GgufModelConfig((*fb)->contents(), bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("rope_factors_short.weight"), std::string::npos)
      << refused.status().ToString();
}

class Phi3ModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (FindNpmDir().empty()) GTEST_SKIP() << "no tokenizer packages (scripts/bootstrap)";
    const json rs = Phi3()["rope_scaling"];
    MakeTinyModel(dir_.path(), "phi3", DType::kF32,
                  {"partial_rotary_factor=0.5", "original_max_position_embeddings=64", "rope_scaling=" + rs.dump()});
    backend_ = MakeCpuBackend({2});
  }
  std::vector<float> Logits(Model& m, const std::vector<int32_t>& tokens) {
    BatchBuilder bb(16, 16);
    const int seq = bb.AddSequence();
    auto batch = bb.Build({{seq, tokens, {static_cast<int32_t>(tokens.size()) - 1}}});
    EXPECT_TRUE(batch.ok());
    auto cache = m.CreateKvCache(16, 16);
    EXPECT_TRUE(cache.ok());
    std::vector<float> out;
    Status s = m.Forward(*batch, cache->get(), &out);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }
  TempDir dir_;
  std::unique_ptr<Backend> backend_;
};

TEST_F(Phi3ModelTest, SetMaxModelLenSwitchesTheFactorSetForTheWholeDeployment) {
  auto a = Model::Load(dir_.path(), backend_.get());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  std::mt19937 rng(3);
  const std::vector<int32_t> tokens = RandomTokens(rng, 40, 32064);
  const std::vector<float> long_default = Logits(**a, tokens);
  ASSERT_TRUE((*a)->SetMaxModelLen(64).ok());
  const std::vector<float> short_set = Logits(**a, tokens);
  ASSERT_EQ(long_default.size(), short_set.size());
  EXPECT_NE(0, std::memcmp(long_default.data(), short_set.data(), short_set.size() * 4))
      << "short and long factors must rotate differently";
  ASSERT_TRUE((*a)->SetMaxModelLen(4096).ok());
  const std::vector<float> long_again = Logits(**a, tokens);
  EXPECT_EQ(0, std::memcmp(long_default.data(), long_again.data(), long_again.size() * 4));
  EXPECT_FALSE((*a)->SetMaxModelLen(0).ok());
}

TEST_F(Phi3ModelTest, FusedTensorOfTheWrongShapeIsRefusedByName) {
  // A config that implies more KV rows than the stored qkv_proj holds.
  const std::string path = dir_.path() + "/config.json";
  json cfg;
  {
    std::ifstream in(path);
    cfg = json::parse(in);
  }
  cfg["num_key_value_heads"] = 4;
  {
    std::ofstream out(path);
    out << cfg.dump();
  }
  auto m = Model::Load(dir_.path(), backend_.get());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.layers.0.self_attn.qkv_proj.weight"), std::string::npos)
      << m.status().ToString();
}

}  // namespace
}  // namespace tessera
