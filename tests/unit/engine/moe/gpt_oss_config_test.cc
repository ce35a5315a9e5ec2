// gpt-oss (GptOssForCausalLM) as ModelConfig data and weight specs: the alternating
// sliding window, sinks, biases, top-k-softmax routing and the clamped SwiGLU.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model_config.h"
#include "engine/weight_specs.h"

namespace tessera {
namespace {

using json = nlohmann::json;

// gpt-oss-20b's config, shrunk (as published: no layer_types in older copies).
json GptOss() {
  return {{"architectures", {"GptOssForCausalLM"}},
          {"model_type", "gpt_oss"},
          {"vocab_size", 1000},
          {"hidden_size", 64},
          {"intermediate_size", 32},
          {"num_hidden_layers", 4},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 16},
          {"num_local_experts", 8},
          {"num_experts_per_tok", 2},
          {"sliding_window", 128},
          {"swiglu_limit", 7.0},
          {"rope_theta", 150000},
          {"rope_scaling",
           {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
            {"original_max_position_embeddings", 4096}, {"truncate", false}}},
          {"quantization_config", {{"quant_method", "mxfp4"}}}};
}

TEST(GptOssConfigTest, FieldsAsData) {
  auto c = ParseModelConfig(GptOss().dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->attn_sinks);
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_TRUE(c->o_bias);
  EXPECT_EQ(c->layer_sliding_window, (std::vector<int64_t>{128, 0, 128, 0}));  // even layers slide
  EXPECT_EQ(c->rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_FALSE(c->rope_scaling.truncate);
  const MoeConfig& m = c->moe;
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.top_k, 2);
  EXPECT_EQ(m.expert_inter, 32);  // each expert is intermediate_size wide
  EXPECT_EQ(m.scoring, MoeScoring::kSoftmaxTopK);
  EXPECT_TRUE(m.router_bias);
  EXPECT_TRUE(m.expert_bias);
  EXPECT_EQ(m.activation, MoeActivation::kSwigluOai);
  EXPECT_DOUBLE_EQ(m.swiglu_alpha, 1.702);
  EXPECT_DOUBLE_EQ(m.swiglu_limit, 7.0);
  EXPECT_EQ(c->num_moe_layers(), 4);
}

TEST(GptOssConfigTest, LayerTypesOlderNamesAndRefusals) {
  json j = GptOss();
  j["layer_types"] = {"full_attention", "sliding_attention", "sliding_attention", "full_attention"};
  j.erase("num_experts_per_tok");
  j["experts_per_token"] = 3;  // the older name
  j["swiglu_alpha"] = 2.0;
  auto c = ParseModelConfig(j.dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->layer_sliding_window, (std::vector<int64_t>{0, 128, 128, 0}));
  EXPECT_EQ(c->moe.top_k, 3);
  EXPECT_DOUBLE_EQ(c->moe.swiglu_alpha, 2.0);

  json fp8 = GptOss();
  fp8["quantization_config"] = {{"quant_method", "fp8"}};
  auto r = ParseModelConfig(fp8.dump(), "config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("quantization_config.quant_method"), std::string::npos) << r.status().ToString();
  json k = GptOss();
  k["num_experts_per_tok"] = 9;
  r = ParseModelConfig(k.dump(), "config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("num_experts_per_tok"), std::string::npos);
}

TEST(GptOssConfigTest, WeightSpecsUseHfStackedNames) {
  auto c = ParseModelConfig(GptOss().dump(), "config.json");
  ASSERT_TRUE(c.ok());
  int sinks = 0, router_bias = 0;
  bool gate = false, up = false, down_bias = false;
  for (const WeightSpec& s : ExpectedWeights(*c)) {
    if (s.role == WeightRole::kSinks) {
      ++sinks;
      EXPECT_EQ(s.shape, std::vector<int64_t>{4});
      EXPECT_FALSE(s.IsMoe());
    }
    if (s.role == WeightRole::kRouterBias) {
      ++router_bias;
      EXPECT_TRUE(s.IsMoe());
    }
    if (s.layer != 1 || s.expert != 3) continue;
    if (s.role == WeightRole::kExpertGate) {
      gate = true;
      EXPECT_EQ(s.name, "model.layers.1.mlp.experts.gate_up_proj");
      EXPECT_TRUE(s.stacked);
      EXPECT_EQ(s.row_offset, 0);
      EXPECT_EQ(s.row_step, 2);
      EXPECT_EQ(s.stored_rows, 64);
    }
    if (s.role == WeightRole::kExpertUp) {
      up = true;
      EXPECT_EQ(s.row_offset, 1);
    }
    if (s.role == WeightRole::kExpertDownBias) {
      down_bias = true;
      EXPECT_EQ(s.name, "model.layers.1.mlp.experts.down_proj_bias");
      EXPECT_EQ(s.shape, std::vector<int64_t>{64});
      EXPECT_TRUE(s.IsMoe() && s.IsExpert());
    }
  }
  EXPECT_EQ(sinks, 4);
  EXPECT_EQ(router_bias, 4);
  EXPECT_TRUE(gate && up && down_bias);
}

}  // namespace
}  // namespace tessera
