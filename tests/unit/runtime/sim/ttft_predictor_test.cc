#include "runtime/sim/ttft_predictor.h"

#include <gtest/gtest.h>

namespace tessera::sim {
namespace {

LinearCostModel Model() {
  LinearCoefficients c;
  c.base_ms = 2;
  c.per_prefill_token_ms = 0.01;
  c.per_prefill_attention_ms = 0.0001;
  c.per_decode_seq_ms = 0.5;
  c.per_decode_token_ms = 0.1;
  c.per_decode_context_ms = 0.001;
  return LinearCostModel(c);
}

TEST(PrefillAttentionTest, ChunkingDoesNotChangeTheSum) {
  EXPECT_EQ(PrefillAttention(0, 100), 5050);  // 1 + 2 + ... + 100
  EXPECT_EQ(PrefillAttention(0, 40) + PrefillAttention(40, 100), 5050);
  EXPECT_EQ(PrefillAttention(10, 13), 11 + 12 + 13);
  EXPECT_EQ(PrefillAttention(5, 5), 0);
}

// Three 100-token prompts queued (none cached), two decodes at contexts 40 and
// 60, a 130-token step budget: 128 prefill tokens per step. The arrival's own
// 100 tokens make 400: steps of 128, 128, 128, 16, its first token with the
// 4th. By hand, step by step (base + tokens + attention + decodes + context):
//   tokens 400 * 0.01 = 4; attention (3 + 1) * 5050 * 0.0001 = 2.02;
//   4 steps * 2 = 8; 4 steps * 2 decodes * (0.5 + 0.1) = 4.8;
//   context (100 + 102 + 104 + 106) * 0.001 = 0.412   => 19.232 ms.
// The queue ahead drains in 3 steps: 3 * 2 + 300 * 0.01 + 3 * 5050 * 0.0001
//   + 3 * 2 * 0.6 + (100 + 102 + 104) * 0.001 = 14.421 ms.
TEST(PredictTtftTest, QueueOfPromptsByHand) {
  PrefillQueue q;
  q.prefill_tokens = 300;
  q.prefill_attention = 3 * PrefillAttention(0, 100);
  q.num_decodes = 2;
  q.decode_context = 40 + 60;
  const TtftPrediction p = PredictTtft(Model(), q, 100, 0, 130);
  EXPECT_EQ(p.steps, 4);
  EXPECT_NEAR(p.ttft_s, 19.232e-3, 1e-9);
  EXPECT_NEAR(p.drain_s, 14.421e-3, 1e-9);
}

TEST(PredictTtftTest, CachedPrefixIsNotRecomputed) {
  // 100 tokens, 64 cached: 36 computed at positions 64..99, one step.
  const TtftPrediction p = PredictTtft(Model(), {}, 100, 64, 512);
  EXPECT_EQ(p.steps, 1);
  const double attention = static_cast<double>(PrefillAttention(64, 100));
  EXPECT_NEAR(p.ttft_s, (2 + 36 * 0.01 + attention * 0.0001) * 1e-3, 1e-9);
  EXPECT_EQ(p.drain_s, 0);
  // A fully cached prompt still computes its last token.
  EXPECT_NEAR(PredictTtft(Model(), {}, 100, 100, 512).ttft_s, (2 + 0.01 + 100 * 0.0001) * 1e-3, 1e-9);
}

TEST(PredictTtftTest, DecodesFillingTheBudgetLeaveOneTokenPerStep) {
  PrefillQueue q;
  q.num_decodes = 8;
  const TtftPrediction p = PredictTtft(Model(), q, 3, 0, 8);
  EXPECT_EQ(p.steps, 3);
  // 3 steps * (2 + 8 * 0.6) + 3 tokens * 0.01 + 6 attended * 0.0001 + context (0 + 8 + 16) * 0.001.
  EXPECT_NEAR(p.ttft_s, (3 * (2 + 8 * 0.6) + 0.03 + 0.0006 + 0.024) * 1e-3, 1e-9);
}

}  // namespace
}  // namespace tessera::sim
