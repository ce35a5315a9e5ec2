// ServingMetrics: the MoE expert-load counters (tessera:moe_expert_tokens_total),
// and the step-time histograms (measured, and the cost model's relative error).
#include "server/serving/metrics.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace tessera {
namespace {

// The value of the sample whose line contains every one of `parts`, or -1.
double Sample(const std::string& text, const std::vector<std::string>& parts) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    bool all = true;
    for (const auto& p : parts) all &= line.find(p) != std::string::npos;
    if (all) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

int CountSeries(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += line.rfind(name + "{", 0) == 0 ? 1 : 0;
  return n;
}

TEST(ServingMetricsTest, ExpertTokensPerLayerAndExpert) {
  ServingMetrics m("moe");
  const std::string name = "tessera:moe_expert_tokens_total";
  m.UpdateExpertLoad({});  // dense model: nothing exported
  EXPECT_EQ(CountSeries(m.Serialize(), name), 0);
  ExpertLoad load;
  load.num_experts = 4;
  load.layers = {1, 3};
  load.counts = {5, 0, 2, 1, 0, 0, 7, 9};
  m.UpdateExpertLoad(load);
  std::string text = m.Serialize();
  EXPECT_EQ(CountSeries(text, name), 8);
  EXPECT_EQ(Sample(text, {name, "layer=\"1\"", "expert=\"0\"", "model_name=\"moe\""}), 5);
  EXPECT_EQ(Sample(text, {name, "layer=\"3\"", "expert=\"3\""}), 9);
  // Counters advance by the difference to the last snapshot.
  load.counts = {6, 0, 2, 1, 0, 4, 7, 9};
  m.UpdateExpertLoad(load);
  m.UpdateExpertLoad(load);
  text = m.Serialize();
  EXPECT_EQ(Sample(text, {name, "layer=\"1\"", "expert=\"0\""}), 6);
  EXPECT_EQ(Sample(text, {name, "layer=\"3\"", "expert=\"1\""}), 4);
}

TEST(ServingMetricsTest, StepTimeAndPredictionError) {
  ServingMetrics m("m");
  m.ObserveStepTime(0.004, -1);  // no cost model: no prediction
  std::string text = m.Serialize();
  EXPECT_EQ(Sample(text, {"tessera:step_time_seconds_count"}), 1);
  EXPECT_EQ(Sample(text, {"tessera:step_time_prediction_error_count"}), 0);
  m.ObserveStepTime(0.010, 0.0118);  // +18%
  m.ObserveStepTime(0.010, 0.009);  // -10%
  text = m.Serialize();
  EXPECT_EQ(Sample(text, {"tessera:step_time_seconds_count"}), 3);
  EXPECT_NEAR(Sample(text, {"tessera:step_time_seconds_sum"}), 0.024, 1e-12);
  EXPECT_EQ(Sample(text, {"tessera:step_time_prediction_error_count"}), 2);
  EXPECT_NEAR(Sample(text, {"tessera:step_time_prediction_error_sum"}), 0.08, 1e-9);
  EXPECT_EQ(Sample(text, {"tessera:step_time_prediction_error_bucket", "le=\"-0.05\""}), 1);
  EXPECT_EQ(Sample(text, {"tessera:step_time_prediction_error_bucket", "le=\"0.15\""}), 1);
  EXPECT_EQ(Sample(text, {"tessera:step_time_prediction_error_bucket", "le=\"0.2\""}), 2);
}

// Expert parallelism: the pairs each rank computed, and EPLB rebalances.
TEST(ServingMetricsTest, ExpertLoadByRankAndRebalances) {
  ServingMetrics m("ep");
  ExpertLoad load;
  load.num_experts = 2;
  load.layers = {0};
  load.counts = {5, 3};
  load.world_size = 2;
  load.rank_counts = {4, 1, 0, 3};  // [expert][rank]
  load.rebalances = 2;
  m.UpdateExpertLoad(load);
  std::string text = m.Serialize();
  const std::string name = "tessera:moe_expert_rank_tokens_total";
  EXPECT_EQ(CountSeries(text, name), 4);
  EXPECT_EQ(Sample(text, {name, "layer=\"0\"", "expert=\"0\"", "rank=\"1\""}), 1);
  EXPECT_EQ(Sample(text, {name, "layer=\"0\"", "expert=\"1\"", "rank=\"1\""}), 3);
  EXPECT_EQ(Sample(text, {"tessera:eplb_rebalances_total", "model_name=\"ep\""}), 2);
  load.rank_counts = {6, 1, 0, 3};
  load.rebalances = 3;
  m.UpdateExpertLoad(load);
  text = m.Serialize();
  EXPECT_EQ(Sample(text, {name, "layer=\"0\"", "expert=\"0\"", "rank=\"0\""}), 6);
  EXPECT_EQ(Sample(text, {"tessera:eplb_rebalances_total"}), 3);
}

TEST(ServingMetricsTest, ExpertSeriesAreBounded) {
  ServingMetrics m("big");
  // 64 layers x 128 experts would be 8192 series: summed over layers instead.
  ExpertLoad load;
  load.num_experts = 128;
  for (int64_t l = 0; l < 64; ++l) load.layers.push_back(l);
  load.counts.assign(64 * 128, 1);
  load.counts[5 * 128 + 7] = 11;
  ASSERT_GT(64 * 128, ServingMetrics::kMaxExpertSeries);
  m.UpdateExpertLoad(load);
  const std::string text = m.Serialize();
  EXPECT_EQ(CountSeries(text, "tessera:moe_expert_tokens_total"), 128);
  EXPECT_EQ(Sample(text, {"tessera:moe_expert_tokens_total", "layer=\"all\"", "expert=\"7\""}), 63 + 11);
  EXPECT_EQ(Sample(text, {"tessera:moe_expert_tokens_total", "layer=\"all\"", "expert=\"8\""}), 64);
}

}  // namespace
}  // namespace tessera
