// MoeBlock alone: a shared expert without a sigmoid gate (DeepSeek's) is added to the
// routed experts' output, bit for bit routed + shared, not computed and dropped.
#include "engine/moe/moe_block.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/model_config.h"
#include "engine/weight_specs.h"

namespace tessera {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(MoeBlockTest, UngatedSharedExpertIsAddedToTheRoutedOutput) {
  const char* json = R"({"architectures": ["Qwen2MoeForCausalLM"], "vocab_size": 100, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "num_experts": 4,
    "num_experts_per_tok": 2, "moe_intermediate_size": 16, "shared_expert_intermediate_size": 24})";
  auto parsed = ParseModelConfig(json, "config.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ModelConfig c = *parsed;
  c.moe.shared_gate = false;  // a plain shared expert
  auto backend = MakeCpuBackend({1});
  const int64_t h = c.hidden_size, t = 3, si = c.moe.shared_inter;
  std::vector<std::vector<float>> store;
  auto run = [&](bool zero_shared) {
    auto block = MoeBlock::Create(c, backend.get());
    EXPECT_TRUE(block.ok()) << block.status().ToString();
    uint32_t seed = 1;
    for (const WeightSpec& spec : ExpectedWeights(c)) {
      if (!spec.IsMoe() || spec.role == WeightRole::kSharedExpertGate) continue;
      const bool shared = spec.role == WeightRole::kSharedGate || spec.role == WeightRole::kSharedUp ||
                          spec.role == WeightRole::kSharedDown;
      store.push_back(Random(spec.shape[0] * spec.shape[1], seed++, zero_shared && shared ? 0.0f : 0.5f));
      EXPECT_TRUE((*block)->Bind(spec, {store.back().data(), DType::kF32, spec.shape[0], spec.shape[1]}, "t").ok());
    }
    EXPECT_TRUE((*block)->Validate().ok());
    EXPECT_TRUE((*block)->EnsureWorkspace(t).ok());
    const std::vector<float> x = Random(t * h, 99);
    std::vector<float> out(t * h);
    (*block)->Forward(0, x.data(), t, out.data());
    return out;
  };
  const std::vector<float> routed = run(true), both = run(false);
  // The shared expert alone, from the same weights (seeds follow the spec order).
  std::vector<float> gate, up, down;
  uint32_t seed = 1;
  for (const WeightSpec& spec : ExpectedWeights(c)) {
    if (!spec.IsMoe() || spec.role == WeightRole::kSharedExpertGate) continue;
    std::vector<float> w = Random(spec.shape[0] * spec.shape[1], seed++, 0.5f);
    if (spec.role == WeightRole::kSharedGate) gate = w;
    if (spec.role == WeightRole::kSharedUp) up = w;
    if (spec.role == WeightRole::kSharedDown) down = w;
  }
  const std::vector<float> x = Random(t * h, 99);
  std::vector<float> gu(t * 2 * si), act(t * si), shared(t * h);
  backend->Linear(x.data(), t, {gate.data(), DType::kF32, si, h}, nullptr, gu.data(), 2 * si);
  backend->Linear(x.data(), t, {up.data(), DType::kF32, si, h}, nullptr, gu.data() + si, 2 * si);
  backend->SiluMul(gu.data(), t, si, act.data());
  backend->Linear(act.data(), t, {down.data(), DType::kF32, h, si}, nullptr, shared.data(), h);
  bool any = false;
  for (int64_t i = 0; i < t * h; ++i) {
    EXPECT_EQ(both[i], routed[i] + shared[i]) << i;
    any |= shared[i] != 0.0f;
  }
  EXPECT_TRUE(any);
}

}  // namespace
}  // namespace tessera
