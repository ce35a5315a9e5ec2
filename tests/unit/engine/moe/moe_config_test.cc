// MoE fields of ModelConfig (Mixtral, Qwen2-MoE, Qwen3-MoE) and their weight specs.
#include <algorithm>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model_config.h"
#include "engine/weight_specs.h"

namespace tessera {
namespace {

using json = nlohmann::json;

json Base(const char* arch) {
  return {{"architectures", {arch}}, {"vocab_size", 1000},       {"hidden_size", 64},
          {"intermediate_size", 128}, {"num_hidden_layers", 4}, {"num_attention_heads", 4},
          {"num_key_value_heads", 2}, {"rms_norm_eps", 1e-5}};
}

json Mixtral() {
  json c = Base("MixtralForCausalLM");
  c["num_local_experts"] = 8;
  c["num_experts_per_tok"] = 2;
  return c;
}

json Qwen2Moe() {
  json c = Base("Qwen2MoeForCausalLM");
  c["num_experts"] = 8;
  c["num_experts_per_tok"] = 4;
  c["moe_intermediate_size"] = 32;
  c["shared_expert_intermediate_size"] = 96;
  return c;
}

json Qwen3Moe() {
  json c = Base("Qwen3MoeForCausalLM");
  c["num_experts"] = 16;
  c["num_experts_per_tok"] = 4;
  c["moe_intermediate_size"] = 32;
  c["norm_topk_prob"] = true;
  c["head_dim"] = 32;
  return c;
}

std::string Error(const json& j) {
  auto c = ParseModelConfig(j.dump(), "config.json");
  return c.ok() ? "" : c.status().ToString();
}

TEST(MoeConfigTest, Mixtral) {
  auto c = ParseModelConfig(Mixtral().dump(), "c");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->is_moe());
  EXPECT_EQ(c->moe.num_experts, 8);
  EXPECT_EQ(c->moe.top_k, 2);
  EXPECT_EQ(c->moe.expert_inter, 128);  // Mixtral experts are intermediate_size wide
  EXPECT_TRUE(c->moe.norm_topk_prob);
  EXPECT_EQ(c->moe.shared_inter, 0);
  EXPECT_EQ(c->layer_moe, std::vector<bool>(4, true));
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_GT(c->NumParameters(), c->NumActiveParameters());
}

TEST(MoeConfigTest, MixtralDefaultsAndWindow) {
  json j = Mixtral();
  j.erase("num_local_experts");
  j.erase("num_experts_per_tok");
  j["sliding_window"] = 32;
  auto c = ParseModelConfig(j.dump(), "c");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->moe.num_experts, 8);  // MixtralConfig defaults
  EXPECT_EQ(c->moe.top_k, 2);
  EXPECT_EQ(c->layer_sliding_window, std::vector<int64_t>(4, 32));
}

TEST(MoeConfigTest, Qwen2MoeSharedExpertAndSparseLayers) {
  json j = Qwen2Moe();
  j["decoder_sparse_step"] = 2;
  j["mlp_only_layers"] = {3};
  auto c = ParseModelConfig(j.dump(), "c");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->moe.expert_inter, 32);
  EXPECT_EQ(c->moe.shared_inter, 96);
  EXPECT_TRUE(c->moe.shared_gate);
  EXPECT_FALSE(c->moe.norm_topk_prob);  // Qwen2MoeConfig default
  EXPECT_TRUE(c->qkv_bias);
  // (i + 1) % 2 == 0 -> layers 1 and 3; 3 is mlp-only.
  EXPECT_EQ(c->layer_moe, (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(c->num_moe_layers(), 1);
}

TEST(MoeConfigTest, Qwen3Moe) {
  auto c = ParseModelConfig(Qwen3Moe().dump(), "c");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->qk_norm);
  EXPECT_TRUE(c->moe.norm_topk_prob);
  EXPECT_EQ(c->moe.shared_inter, 0);
  EXPECT_FALSE(c->moe.shared_gate);
  EXPECT_EQ(c->layer_moe, std::vector<bool>(4, true));
}

TEST(MoeConfigTest, ErrorsNameTheField) {
  json j = Mixtral();
  j["num_experts_per_tok"] = 9;
  EXPECT_NE(Error(j).find("'num_experts_per_tok' (9) must be <= 'num_local_experts' (8)"), std::string::npos)
      << Error(j);
  j = Qwen3Moe();
  j["num_experts_per_tok"] = 17;
  EXPECT_NE(Error(j).find("'num_experts_per_tok' (17) must be <= 'num_experts' (16)"), std::string::npos);
  j = Qwen3Moe();
  j["num_experts_per_tok"] = 0;
  EXPECT_NE(Error(j).find("'num_experts_per_tok' must be >= 1"), std::string::npos) << Error(j);
  j = Qwen3Moe();
  j.erase("moe_intermediate_size");
  EXPECT_NE(Error(j).find("missing required field 'moe_intermediate_size'"), std::string::npos);
  j = Qwen2Moe();
  j.erase("shared_expert_intermediate_size");
  EXPECT_NE(Error(j).find("'shared_expert_intermediate_size'"), std::string::npos);
  j = Qwen2Moe();
  j["mlp_only_layers"] = {0, 7};
  EXPECT_NE(Error(j).find("'mlp_only_layers' names layer 7"), std::string::npos) << Error(j);
  j = Qwen2Moe();
  j["mlp_only_layers"] = {0, 1, 2, 3};
  EXPECT_NE(Error(j).find("leave no MoE layer"), std::string::npos);
  j = Qwen2Moe();
  j["decoder_sparse_step"] = 0;
  EXPECT_NE(Error(j).find("'decoder_sparse_step' must be >= 1"), std::string::npos);
  j = Qwen2Moe();
  j["norm_topk_prob"] = "yes";
  EXPECT_NE(Error(j).find("'norm_topk_prob' must be true or false"), std::string::npos);
  j = Mixtral();
  j["num_local_experts"] = 100000;
  EXPECT_NE(Error(j).find("'num_local_experts' must be <= 65536"), std::string::npos) << Error(j);
  j = Qwen2Moe();
  j["num_hidden_layers"] = 100000;
  EXPECT_NE(Error(j).find("'num_hidden_layers' must be <= 4096"), std::string::npos) << Error(j);
}

// A fuzzed GGUF listed ~10^5 dense layers against 4096 layers and spun for minutes:
// the list is applied in one pass, so a long one costs milliseconds.
TEST(MoeConfigTest, LongMlpOnlyListIsLinear) {
  json j = Qwen2Moe();
  j["num_hidden_layers"] = 4096;
  json dense = json::array();
  for (int i = 0; i < 200000; ++i) dense.push_back(i % 4095);
  j["mlp_only_layers"] = dense;
  auto c = ParseModelConfig(j.dump(), "c");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->num_moe_layers(), 1);  // only layer 4095 is left sparse
}

TEST(MoeConfigTest, WeightSpecsUseHfNames) {
  auto mix = ParseModelConfig(Mixtral().dump(), "c");
  ASSERT_TRUE(mix.ok());
  auto names = [](const ModelConfig& c) {
    std::vector<std::string> n;
    for (const auto& s : ExpectedWeights(c)) n.push_back(s.name);
    return n;
  };
  auto has = [](const std::vector<std::string>& n, const std::string& x) {
    return std::find(n.begin(), n.end(), x) != n.end();
  };
  auto n = names(*mix);
  EXPECT_TRUE(has(n, "model.layers.0.block_sparse_moe.gate.weight"));
  EXPECT_TRUE(has(n, "model.layers.3.block_sparse_moe.experts.7.w1.weight"));
  EXPECT_TRUE(has(n, "model.layers.3.block_sparse_moe.experts.7.w2.weight"));
  EXPECT_TRUE(has(n, "model.layers.3.block_sparse_moe.experts.7.w3.weight"));
  EXPECT_FALSE(has(n, "model.layers.0.mlp.gate_proj.weight"));
  json j = Qwen2Moe();
  j["mlp_only_layers"] = {0};
  auto q2 = ParseModelConfig(j.dump(), "c");
  ASSERT_TRUE(q2.ok());
  n = names(*q2);
  EXPECT_TRUE(has(n, "model.layers.0.mlp.gate_proj.weight"));  // dense layer
  EXPECT_TRUE(has(n, "model.layers.1.mlp.gate.weight"));
  EXPECT_TRUE(has(n, "model.layers.1.mlp.experts.3.down_proj.weight"));
  EXPECT_TRUE(has(n, "model.layers.1.mlp.shared_expert.up_proj.weight"));
  EXPECT_TRUE(has(n, "model.layers.1.mlp.shared_expert_gate.weight"));
  for (const auto& s : ExpectedWeights(*q2)) {
    if (s.name == "model.layers.1.mlp.experts.3.down_proj.weight") {
      EXPECT_EQ(s.shape, (std::vector<int64_t>{64, 32}));
      EXPECT_EQ(s.expert, 3);
      EXPECT_EQ(s.role, WeightRole::kExpertDown);
    }
    if (s.name == "model.layers.1.mlp.gate.weight") {
      EXPECT_EQ(s.shape, (std::vector<int64_t>{8, 64}));
    }
  }
}

}  // namespace
}  // namespace tessera
