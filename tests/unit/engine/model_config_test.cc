#include "engine/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "engine/rope.h"

namespace tessera {
namespace {

using json = nlohmann::json;

json Llama() {
  return {{"architectures", {"LlamaForCausalLM"}},
          {"vocab_size", 1000},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 500000.0},
          {"max_position_embeddings", 2048}};
}

TEST(ModelConfigTest, ParsesLlama) {
  auto c = ParseModelConfig(Llama().dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->layer_sliding_window, std::vector<int64_t>(2, 0));
}

TEST(ModelConfigTest, ArchitectureTraits) {
  json q2 = Llama();
  q2["architectures"] = {"Qwen2ForCausalLM"};
  EXPECT_TRUE(ParseModelConfig(q2.dump(), "c")->qkv_bias);
  json q3 = Llama();
  q3["architectures"] = {"Qwen3ForCausalLM"};
  q3["head_dim"] = 32;
  auto c3 = ParseModelConfig(q3.dump(), "c");
  EXPECT_TRUE(c3->qk_norm);
  EXPECT_EQ(c3->head_dim, 32);
  json m = Llama();
  m["architectures"] = {"MistralForCausalLM"};
  m["sliding_window"] = 8;
  EXPECT_EQ(ParseModelConfig(m.dump(), "c")->layer_sliding_window, std::vector<int64_t>(2, 8));
  // Qwen2 ignores sliding_window unless use_sliding_window, and then only on
  // layers >= max_window_layers.
  q2["sliding_window"] = 8;
  EXPECT_EQ(ParseModelConfig(q2.dump(), "c")->layer_sliding_window, std::vector<int64_t>(2, 0));
  q2["use_sliding_window"] = true;
  q2["max_window_layers"] = 1;
  EXPECT_EQ(ParseModelConfig(q2.dump(), "c")->layer_sliding_window, (std::vector<int64_t>{0, 8}));
}

json Gemma2() {
  json j = Llama();
  j["architectures"] = {"Gemma2ForCausalLM"};
  j["num_hidden_layers"] = 4;
  j["head_dim"] = 32;
  j["query_pre_attn_scalar"] = 24;
  j["sliding_window"] = 16;
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["attn_logit_softcapping"] = 50.0;
  j["final_logit_softcapping"] = 30.0;
  j["hidden_size"] = 48;  // sqrt(48) = 6.928203..., not a bf16 value
  j["torch_dtype"] = "bfloat16";
  return j;
}

TEST(ModelConfigTest, ParsesGemma2) {
  auto c = ParseModelConfig(Gemma2().dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->head_dim, 32);  // independent of hidden / heads
  EXPECT_EQ(c->hidden_act, GluActivation::kGeluTanh);
  EXPECT_TRUE(c->sandwich_norms);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->norm_weight_offset, 1.0);
  EXPECT_EQ(c->query_pre_attn_scalar, 24.0);
  EXPECT_EQ(c->attn_logit_softcapping, 50.0);
  EXPECT_EQ(c->final_logit_softcapping, 30.0);
  // Every other layer slides, from layer 0; one RoPE table.
  EXPECT_EQ(c->layer_sliding_window, (std::vector<int64_t>{16, 0, 16, 0}));
  EXPECT_EQ(c->layer_rope, (std::vector<int32_t>(4, 0)));
  EXPECT_EQ(c->rope_local_theta, 0.0);
  // transformers computes the normalizer in the checkpoint dtype: sqrt(48) in bf16.
  EXPECT_EQ(c->embedding_scale, 6.9375);
  json f32 = Gemma2();
  f32["torch_dtype"] = "float32";
  EXPECT_EQ(ParseModelConfig(f32.dump(), "c")->embedding_scale, static_cast<double>(std::sqrt(48.0f)));
  // Gemma2Config's defaults for omitted fields: capping 50 / 30, window 4096, head_dim 256.
  json sparse = Gemma2();
  for (const char* k : {"attn_logit_softcapping", "final_logit_softcapping", "sliding_window", "head_dim",
                        "query_pre_attn_scalar"}) {
    sparse.erase(k);
  }
  auto d = ParseModelConfig(sparse.dump(), "c");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->attn_logit_softcapping, 50.0);
  EXPECT_EQ(d->final_logit_softcapping, 30.0);
  EXPECT_EQ(d->layer_sliding_window[0], 4096);
  EXPECT_EQ(d->head_dim, 256);
  EXPECT_EQ(d->query_pre_attn_scalar, 256.0);
  // An explicit null turns capping off.
  json off = Gemma2();
  off["final_logit_softcapping"] = nullptr;
  EXPECT_EQ(ParseModelConfig(off.dump(), "c")->final_logit_softcapping, 0.0);
  json bad = Gemma2();
  bad["hidden_activation"] = "gelu";
  auto b = ParseModelConfig(bad.dump(), "c");
  EXPECT_EQ(b.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(b.status().message().find("hidden_activation"), std::string::npos);
}

TEST(ModelConfigTest, ParsesGemma3AndItsVisionCheckpoint) {
  json j = Gemma2();
  j["architectures"] = {"Gemma3ForCausalLM"};
  j["num_hidden_layers"] = 7;
  j["attn_logit_softcapping"] = nullptr;
  j["final_logit_softcapping"] = nullptr;
  j["rope_local_base_freq"] = 5000.0;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  auto c = ParseModelConfig(j.dump(), "c");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->qk_norm);
  EXPECT_EQ(c->attn_logit_softcapping, 0.0);
  // sliding_window_pattern 6 (default): layers 5, 11, ... are global, with rope_theta
  // and the scaling; sliding layers use the local base.
  EXPECT_EQ(c->layer_sliding_window, (std::vector<int64_t>{16, 16, 16, 16, 16, 0, 16}));
  EXPECT_EQ(c->layer_rope, (std::vector<int32_t>{1, 1, 1, 1, 1, 0, 1}));
  EXPECT_EQ(c->rope_local_theta, 5000.0);
  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "sliding_attention",
                      "sliding_attention", "sliding_attention", "full_attention"};
  EXPECT_EQ(ParseModelConfig(j.dump(), "c")->layer_rope, (std::vector<int32_t>{0, 1, 0, 1, 1, 1, 0}));
  j["layer_types"] = {"full_attention"};
  EXPECT_NE(ParseModelConfig(j.dump(), "c").status().message().find("layer_types"), std::string::npos);

  // The published multimodal layout: text_config holds only what differs from
  // Gemma3TextConfig; the tensors live under language_model.model.
  json mm = {{"architectures", {"Gemma3ForConditionalGeneration"}},
             {"eos_token_id", {1, 106}},
             {"torch_dtype", "bfloat16"},
             {"text_config", {{"hidden_size", 2560}, {"intermediate_size", 10240}, {"num_hidden_layers", 34},
                              {"model_type", "gemma3_text"}, {"sliding_window", 1024},
                              {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}}}},
             {"vision_config", {{"hidden_size", 1152}}}};
  auto v = ParseModelConfig(mm.dump(), "c");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_TRUE(v->has_vision_tower);
  EXPECT_EQ(v->weight_prefix, "language_model.model.");
  EXPECT_EQ(v->vocab_size, 262208);
  EXPECT_EQ(v->num_q_heads, 8);
  EXPECT_EQ(v->num_kv_heads, 4);
  EXPECT_EQ(v->head_dim, 256);
  EXPECT_TRUE(v->tie_word_embeddings);
  EXPECT_EQ(v->eos_token_ids, (std::vector<int64_t>{1, 106}));
  EXPECT_EQ(v->rope_theta, 1000000.0);
  EXPECT_EQ(v->layer_sliding_window[5], 0);
  EXPECT_EQ(v->layer_sliding_window[4], 1024);
  mm.erase("text_config");
  EXPECT_NE(ParseModelConfig(mm.dump(), "c").status().message().find("text_config"), std::string::npos);
}

struct BadCase {
  std::string name;
  std::function<void(json&)> mutate;
  StatusCode code;
  std::string must_mention;
};

// generation_config.json's eos ids (gpt-oss: <|call|>, <|endoftext|>) join config.json's, once
// each; a malformed or negative one is refused naming the file and field.
TEST(ModelConfigTest, GenerationConfigEosIdsJoinTheModelsStopIds) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tessera-genconfig-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto write = [&](const char* name, const json& j) { std::ofstream(dir / name) << j.dump(); };
  json cfg = Llama();
  cfg["eos_token_id"] = 7;
  write("config.json", cfg);
  auto c = LoadModelConfig(dir.string());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{7}));  // no generation_config.json
  write("generation_config.json", {{"eos_token_id", {7, 9, 12}}, {"temperature", 1.0}});
  c = LoadModelConfig(dir.string());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{7, 9, 12}));
  write("generation_config.json", {{"eos_token_id", "x"}});
  c = LoadModelConfig(dir.string());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("generation_config.json: field 'eos_token_id'"), std::string::npos)
      << c.status().ToString();
  write("generation_config.json", {{"eos_token_id", -1}});
  c = LoadModelConfig(dir.string());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("negative"), std::string::npos) << c.status().ToString();
  fs::remove_all(dir);
}

TEST(ModelConfigTest, BadInputNamesFileAndField) {
  const std::vector<BadCase> cases = {
      {"unknown arch", [](json& j) { j["architectures"] = {"GPT2LMHeadModel"}; }, StatusCode::kUnimplemented,
       "GPT2LMHeadModel"},
      {"no arch", [](json& j) { j.erase("architectures"); }, StatusCode::kInvalidArgument, "architectures"},
      {"missing hidden", [](json& j) { j.erase("hidden_size"); }, StatusCode::kInvalidArgument, "hidden_size"},
      {"string layers", [](json& j) { j["num_hidden_layers"] = "2"; }, StatusCode::kInvalidArgument,
       "num_hidden_layers"},
      {"zero heads", [](json& j) { j["num_attention_heads"] = 0; }, StatusCode::kInvalidArgument,
       "num_attention_heads"},
      {"kv not dividing", [](json& j) { j["num_key_value_heads"] = 3; }, StatusCode::kInvalidArgument,
       "num_key_value_heads"},
      {"negative eps", [](json& j) { j["rms_norm_eps"] = -1.0; }, StatusCode::kInvalidArgument, "rms_norm_eps"},
      {"odd head dim", [](json& j) { j["head_dim"] = 15; }, StatusCode::kInvalidArgument, "head_dim"},
      {"rope type", [](json& j) { j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}}; },
       StatusCode::kUnimplemented, "dynamic"},
      {"rope factor", [](json& j) { j["rope_scaling"] = {{"rope_type", "linear"}}; },
       StatusCode::kInvalidArgument, "factor"},
      {"llama3 fields", [](json& j) { j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}}; },
       StatusCode::kInvalidArgument, "low_freq_factor"},
      {"rope not object", [](json& j) { j["rope_scaling"] = 3; }, StatusCode::kInvalidArgument, "rope_scaling"},
      {"bias not bool", [](json& j) { j["attention_bias"] = "yes"; }, StatusCode::kInvalidArgument,
       "attention_bias"},
      {"eos list", [](json& j) { j["eos_token_id"] = {1, "x"}; }, StatusCode::kInvalidArgument, "eos_token_id"},
  };
  for (const auto& bc : cases) {
    json j = Llama();
    bc.mutate(j);
    auto c = ParseModelConfig(j.dump(), "some/dir/config.json");
    ASSERT_FALSE(c.ok()) << bc.name;
    EXPECT_EQ(c.status().code(), bc.code) << bc.name << ": " << c.status().ToString();
    EXPECT_NE(c.status().message().find("some/dir/config.json"), std::string::npos) << bc.name;
    EXPECT_NE(c.status().message().find(bc.must_mention), std::string::npos)
        << bc.name << ": " << c.status().message();
  }
  EXPECT_FALSE(ParseModelConfig("{not json", "x").ok());
  EXPECT_FALSE(ParseModelConfig("[1,2]", "x").ok());
  EXPECT_EQ(LoadModelConfig("/nonexistent/dir").status().code(), StatusCode::kNotFound);
}

TEST(RopeTest, ScalingVariants) {
  json j = Llama();
  auto base = ComputeRopeFrequencies(*ParseModelConfig(j.dump(), "c"));
  ASSERT_EQ(base.inv_freq.size(), 8u);
  EXPECT_DOUBLE_EQ(base.inv_freq[0], 1.0);
  EXPECT_DOUBLE_EQ(base.attention_factor, 1.0);

  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  auto lin = ComputeRopeFrequencies(*ParseModelConfig(j.dump(), "c"));
  for (size_t i = 0; i < 8; ++i) EXPECT_DOUBLE_EQ(lin.inv_freq[i], base.inv_freq[i] / 4.0);

  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  auto l3 = ComputeRopeFrequencies(*ParseModelConfig(j.dump(), "c"));
  // High frequencies (short wavelengths) unchanged, lowest scaled by 1/factor.
  EXPECT_DOUBLE_EQ(l3.inv_freq[0], base.inv_freq[0]);
  EXPECT_DOUBLE_EQ(l3.inv_freq[7], base.inv_freq[7] / 8.0);

  j["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}};
  auto y = ComputeRopeFrequencies(*ParseModelConfig(j.dump(), "c"));
  EXPECT_NEAR(y.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(y.inv_freq[0], base.inv_freq[0]);
  EXPECT_NEAR(y.inv_freq[7], base.inv_freq[7] / 4.0, 1e-15);
}

}  // namespace
}  // namespace tessera
