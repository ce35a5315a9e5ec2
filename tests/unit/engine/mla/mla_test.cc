// DeepSeek-V2/V3 multi-head latent attention and DeepSeekMoE routing: config parsing and refusals, the KV
// cache layout of planes (bytes per token, MLA block round trips), and load-time
// shape checks. Logits are checked against the NumPy reference
// (tests/reference/test_reference.py, deepseek_v2_lite cases) and batch invariance in
// batch_invariance_test.cc.
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/kv_cache.h"
#include "engine/kv_layout.h"
#include "engine/model.h"
#include "engine/model_config.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

using json = nlohmann::json;

// DeepSeek-V3's published config (61 layers, 128 heads, latent 512 + 64; sigmoid
// scores, noaux_tc over 8 groups, one shared expert).
json V3Shaped() {
  return {{"architectures", {"DeepseekV3ForCausalLM"}}, {"vocab_size", 129280}, {"hidden_size", 7168},
          {"intermediate_size", 18432}, {"num_hidden_layers", 61}, {"num_attention_heads", 128},
          {"num_key_value_heads", 128}, {"q_lora_rank", 1536}, {"kv_lora_rank", 512},
          {"qk_nope_head_dim", 128}, {"qk_rope_head_dim", 64}, {"v_head_dim", 128},
          {"n_routed_experts", 256}, {"num_experts_per_tok", 8}, {"moe_intermediate_size", 2048},
          {"first_k_dense_replace", 3}, {"moe_layer_freq", 1}, {"norm_topk_prob", true},
          {"routed_scaling_factor", 2.5}, {"n_shared_experts", 1}, {"scoring_func", "sigmoid"},
          {"topk_method", "noaux_tc"}, {"n_group", 8}, {"topk_group", 4},
          {"rope_theta", 10000}, {"max_position_embeddings", 163840},
          {"rope_scaling", {{"type", "yarn"}, {"factor", 40}, {"original_max_position_embeddings", 4096},
                            {"beta_fast", 32}, {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}}}};
}

TEST(MlaConfigTest, ParsesDeepseekV3Shape) {
  auto c = ParseModelConfig(V3Shaped().dump(), "config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->attention, AttentionKind::kMla);
  EXPECT_EQ(c->rope_style, RopeStyle::kInterleaved);
  EXPECT_EQ(c->head_dim, 192);
  EXPECT_EQ(c->rotary_dim, 64);
  EXPECT_EQ(c->mla.q_lora_rank, 1536);
  // 192^-1/2 * (0.1 * 1.0 * ln 40 + 1)^2: the softmax carries YaRN's mscale squared.
  const double m = 0.1 * std::log(40.0) + 1.0;
  EXPECT_NEAR(c->attn_scale, m * m / std::sqrt(192.0), 1e-12);
  EXPECT_EQ(c->num_moe_layers(), 58);
  EXPECT_FALSE(c->layer_moe[2]);
  EXPECT_TRUE(c->layer_moe[3]);
  EXPECT_TRUE(c->moe.norm_topk_prob);
  EXPECT_EQ(c->moe.routed_scaling_factor, 2.5);
  EXPECT_EQ(c->moe.scoring, MoeScoring::kSigmoid);
  EXPECT_EQ(c->moe.topk_method, MoeTopkMethod::kNoauxTc);
  EXPECT_TRUE(c->moe.score_correction_bias);
  EXPECT_EQ(c->moe.n_group, 8);
  EXPECT_EQ(c->moe.topk_group, 4);
  EXPECT_EQ(c->moe.shared_inter, 2048);  // n_shared_experts x moe_intermediate_size
  EXPECT_FALSE(c->moe.shared_gate);
  // V2's routing: softmax, groups by their best expert, no correction bias.
  json v2 = V3Shaped();
  v2.merge_patch({{"scoring_func", "softmax"}, {"topk_method", "group_limited_greedy"}, {"n_shared_experts", 2}});
  auto c2 = ParseModelConfig(v2.dump(), "config.json");
  ASSERT_TRUE(c2.ok()) << c2.status().ToString();
  EXPECT_EQ(c2->moe.topk_method, MoeTopkMethod::kGroupLimitedGreedy);
  EXPECT_FALSE(c2->moe.score_correction_bias);
  EXPECT_EQ(c2->moe.shared_inter, 4096);
}

TEST(MlaConfigTest, RefusesWhatIsNotBuiltNamingTheField) {
  const std::vector<std::pair<json, std::string>> bad = {
      {{{"scoring_func", "sqrtsoftplus"}}, "'scoring_func'"},
      {{{"topk_method", "aux_tc"}}, "'topk_method'"},
      {{{"n_group", 7}}, "'n_group'"},
      {{{"n_group", 256}, {"topk_group", 8}}, "'n_group'"},  // noaux_tc needs two experts per group
      {{{"topk_group", 9}}, "'topk_group'"},
      {{{"topk_group", 1}, {"num_experts_per_tok", 33}}, "'num_experts_per_tok'"},
      {{{"n_group", nullptr}}, "'n_group'"},
      {{{"routed_scaling_factor", 0}}, "'routed_scaling_factor'"},
      {{{"rope_interleave", false}}, "'rope_interleave'"},
      {{{"attention_bias", true}}, "'attention_bias'"},
      {{{"quantization_config", {{"quant_method", "fp8"}}}}, "'quantization_config.quant_method'"},
      {{{"kv_lora_rank", nullptr}}, "'kv_lora_rank'"},
      {{{"qk_rope_head_dim", 63}}, "'qk_rope_head_dim'"},
  };
  for (const auto& [patch, field] : bad) {
    json j = V3Shaped();
    j.merge_patch(patch);
    auto c = ParseModelConfig(j.dump(), "config.json");
    ASSERT_FALSE(c.ok()) << patch.dump();
    EXPECT_NE(c.status().message().find(field), std::string::npos) << c.status().ToString();
  }
}

TEST(KvLayoutTest, BytesPerTokenMlaVsMha) {
  auto mla = ParseModelConfig(V3Shaped().dump(), "config.json");
  ASSERT_TRUE(mla.ok());
  const KvCacheLayout l = MakeKvCacheLayout(*mla);
  EXPECT_EQ(l.ElemsPerToken(), 576);  // kv_lora_rank + qk_rope_head_dim, V a view of it
  EXPECT_TRUE(l.v_aliases_k);
  EXPECT_EQ(l.v_elems, 512);
  EXPECT_EQ(mla->KvBytesPerToken(2), 61 * 576 * 2);
  // The same layers as multi-head attention: K and V of 128 heads x 192 per token.
  ModelConfig mha = *mla;
  mha.attention = AttentionKind::kMha;
  mha.num_kv_heads = 128;
  EXPECT_EQ(mha.KvBytesPerToken(2), 61 * 2 * 128 * 192 * 2);
  EXPECT_EQ(mha.KvBytesPerToken(2) / mla->KvBytesPerToken(2), 85);  // 49152 / 576
  EXPECT_EQ(MakeKvCacheLayout(mha).Describe(), "mha k=24576 v=24576");
  EXPECT_EQ(l.Describe(), "mla latent=576 v=first 512");
}

TEST(KvLayoutTest, MlaCacheBlocksRoundTripAndCopy) {
  auto c = ParseModelConfig(V3Shaped().dump(), "config.json");
  ASSERT_TRUE(c.ok());
  c->num_layers = 3;
  auto backend = MakeCpuBackend({1});
  auto cache = KvCache::Create(*c, backend.get(), 4, 8);
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  KvCache& kv = **cache;
  EXPECT_EQ(kv.BlockBytes(), 3 * 8 * 576 * 4);
  EXPECT_EQ(kv.bytes(), 4 * kv.BlockBytes());
  EXPECT_EQ(kv.layer(1).k, kv.layer(1).v);
  EXPECT_NE(kv.layer(1).k, kv.layer(2).k);
  std::string bytes(static_cast<size_t>(kv.BlockBytes()), '\0');
  std::mt19937 rng(5);
  for (char& ch : bytes) ch = static_cast<char>(rng());
  ASSERT_TRUE(kv.WriteBlock(1, bytes).ok());
  // Layer 2's latent rows of block 1 hold the last third of the record.
  const auto* l2 = static_cast<const char*>(kv.layer(2).k) + 8 * 576 * 4;
  EXPECT_EQ(std::string(l2, 8 * 576 * 4), bytes.substr(2 * 8 * 576 * 4));
  std::string back;
  ASSERT_TRUE(kv.ReadBlock(1, &back).ok());
  EXPECT_EQ(back, bytes);
  ASSERT_TRUE(kv.CopyBlocks({{1, 3}}).ok());
  ASSERT_TRUE(kv.ReadBlock(3, &back).ok());
  EXPECT_EQ(back, bytes);
  EXPECT_FALSE(kv.WriteBlock(0, bytes.substr(1)).ok());
}

TEST(MlaLoadTest, KvLoraRankDisagreeingWithTheWeightsIsRefused) {
  testing::TempDir dir;
  testing::MakeTinyModel(dir.path(), "deepseek_v2_lite", DType::kBF16, {"vocab_size=512"});
  const std::string path = dir.path() + "/config.json";
  json j;
  {
    std::ifstream in(path);
    in >> j;
  }
  j["kv_lora_rank"] = 16;  // the checkpoint's latent is 32 wide
  {
    std::ofstream out(path);
    out << j.dump();
  }
  auto backend = MakeCpuBackend({1});
  auto m = Model::Load(dir.path(), backend.get());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("kv_a_proj_with_mqa"), std::string::npos) << m.status().ToString();
  EXPECT_NE(m.status().message().find("kv_lora_rank 16"), std::string::npos) << m.status().ToString();
}

}  // namespace
}  // namespace tessera
