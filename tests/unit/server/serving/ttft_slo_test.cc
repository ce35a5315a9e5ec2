#include "server/serving/ttft_slo.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/openai/api_error.h"
#include "server/serving/metrics.h"

namespace tessera {
namespace {

// 25 ms per prefill token, 1 ms per decode per step, nothing else; SLO 2.5 s:
// 100 prompt tokens fit, 30-token prompts three at a time.
TtftSloOptions Options() {
  sim::LinearCoefficients c;
  c.per_prefill_token_ms = 25;
  c.per_decode_seq_ms = 1;
  return {.slo_ms = 2500, .model = std::make_shared<sim::LinearCostModel>(c)};
}

TEST(TtftSloTest, RefusesTheArrivalThatWouldMissAndSaysWhenTheQueueDrains) {
  ServingMetrics metrics("m");
  metrics.EnableTtftSlo();
  TtftSlo slo(Options(), 2048, &metrics);
  std::vector<TtftSloShare> shares;
  for (int i = 0; i < 3; ++i) {  // 0.75, 1.5, 2.25 s
    StatusOr<TtftSloShare> s = slo.Admit(30, i == 0);
    ASSERT_TRUE(s.ok()) << i << ": " << s.status().ToString();
    EXPECT_EQ(s->tokens, 30);
    shares.push_back(*s);
  }
  StatusOr<TtftSloShare> refused = slo.Admit(30, false);  // 3.0 s; the 90 ahead drain in 2.25 s
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  const std::string& m = refused.status().message();
  EXPECT_NE(m.find("predicted time to first token 3.000 s"), std::string::npos) << m;
  EXPECT_NE(m.find("SLO of 2.500 s (--ttft-slo-ms 2500.000)"), std::string::npos) << m;
  EXPECT_NE(m.find("90 prompt tokens are queued ahead"), std::string::npos) << m;
  const ApiError e = ErrorFromStatus(refused.status());
  EXPECT_EQ(e.status, ApiStatus::kTooManyRequests);
  EXPECT_EQ(RetryAfterSeconds(e), 3);
  EXPECT_DOUBLE_EQ(slo.Attainment(), 0.75);

  // The refused share did not stay; one admitted request's first token frees room.
  slo.Leave(shares[0]);
  EXPECT_TRUE(slo.Admit(30, false).ok());
  EXPECT_DOUBLE_EQ(slo.Attainment(), 0.8);
  const std::string text = metrics.Serialize();
  EXPECT_NE(text.find("tessera:slo_rejections_total{model_name=\"m\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("tessera:predicted_ttft_seconds_count{model_name=\"m\"} 5"), std::string::npos) << text;
  EXPECT_NE(text.find("tessera:predicted_slo_attainment{model_name=\"m\"} 0.8"), std::string::npos) << text;
}

TEST(TtftSloTest, RunningDecodesCountUnlessTheEngineIsIdle) {
  TtftSlo slo(Options(), 2048, nullptr);
  sim::StepShape shape;
  shape.num_decode_seqs = 500;  // 0.5 s a step
  slo.OnStep(shape);
  // 80 tokens: 2.0 s of prefill + one step carrying 500 decodes = 2.5 s: met.
  StatusOr<TtftSloShare> a = slo.Admit(80, false);
  ASSERT_TRUE(a.ok());
  slo.Leave(*a);
  EXPECT_FALSE(slo.Admit(81, false).ok());  // 2.525 s
  EXPECT_TRUE(slo.Admit(81, true).ok());    // no request in flight: the last step's decodes ended
}

TEST(TtftSloTest, WithoutMetricsEnabledNothingIsExported) {
  ServingMetrics metrics("m");
  metrics.ObserveTtftPrediction(1.0, true);
  metrics.SetPredictedSloAttainment(0.5);
  EXPECT_EQ(metrics.Serialize().find("slo"), std::string::npos);
  EXPECT_EQ(metrics.Serialize().find("predicted_ttft"), std::string::npos);
}

}  // namespace
}  // namespace tessera
