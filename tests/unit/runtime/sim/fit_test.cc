// The cost model's fit (runtime/sim/fit.h) and its file (cost_model.h): known
// coefficients come back from synthetic timings, a negative optimum is held at
// 0, dependent features are named, and the JSON round-trips with its
// provenance while refusing bad versions and fields by name.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "runtime/sim/fit.h"

namespace tessera::sim {
namespace {

StepShape Prefill(int64_t tokens, int64_t context) {
  StepShape s;
  s.num_prefill_seqs = 1;
  s.prefill_tokens = tokens;
  s.prefill_attention = tokens * context + tokens * (tokens + 1) / 2;
  return s;
}

StepShape Decode(int64_t seqs, int64_t context, StepShape s = {}) {
  s.num_decode_seqs = seqs;
  s.decode_tokens = seqs;
  s.decode_context = seqs * context;
  return s;
}

// A designed set like calibrate's: prefills at contexts, decode batches, mixed.
std::vector<StepShape> Design() {
  std::vector<StepShape> out;
  for (int64_t ctx : {0, 256, 1024}) {
    for (int64_t p : {16, 64, 256, 512}) out.push_back(Prefill(p, ctx));
  }
  for (int64_t ctx : {64, 512, 2048}) {
    for (int64_t b : {1, 4, 16, 32}) out.push_back(Decode(b, ctx));
  }
  out.push_back(Decode(4, 130, Prefill(64, 0)));
  out.push_back(Decode(16, 130, Prefill(256, 0)));
  return out;
}

std::vector<StepSample> Timed(const LinearCoefficients& c, double noise, int repeats) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(-noise, noise);
  const LinearCostModel truth(c);
  std::vector<StepSample> out;
  for (int r = 0; r < repeats; ++r) {
    for (const StepShape& s : Design()) {
      const double ns = static_cast<double>(truth.StepNs(s)) * (1 + u(rng));
      out.push_back({s, static_cast<int64_t>(std::llround(ns))});
    }
  }
  return out;
}

TEST(CostFitTest, RecoversKnownCoefficientsFromSyntheticTimings) {
  LinearCoefficients c;
  c.base_ms = 3;
  c.per_prefill_token_ms = 0.4;
  c.per_prefill_attention_ms = 2e-5;
  c.per_decode_seq_ms = 1.5;
  c.per_decode_context_ms = 4e-4;
  auto fit = FitLinearCostModel(Timed(c, 0, 1));
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  EXPECT_NEAR(fit->coefficients.base_ms, 3, 1e-4);
  EXPECT_NEAR(fit->coefficients.per_prefill_token_ms, 0.4, 1e-6);
  EXPECT_NEAR(fit->coefficients.per_prefill_attention_ms, 2e-5, 1e-9);
  EXPECT_NEAR(fit->coefficients.per_decode_seq_ms, 1.5, 1e-5);
  EXPECT_NEAR(fit->coefficients.per_decode_context_ms, 4e-4, 1e-8);
  // Without drafts a decode's tokens are its count: that coefficient is not
  // determined, left 0, and named.
  EXPECT_EQ(fit->coefficients.per_decode_token_ms, 0);
  ASSERT_EQ(fit->undetermined.size(), 1u);
  EXPECT_EQ(fit->undetermined[0], "per_decode_token_ms");
  EXPECT_GT(fit->r2, 0.999999);
  EXPECT_LT(fit->max_abs_relative_error, 1e-6);
  EXPECT_EQ(fit->points.size(), Design().size());

  // With +-5% noise and repeats the medians still land within a few percent.
  auto noisy = FitLinearCostModel(Timed(c, 0.05, 5));
  ASSERT_TRUE(noisy.ok());
  EXPECT_NEAR(noisy->coefficients.per_prefill_token_ms, 0.4, 0.04);
  EXPECT_NEAR(noisy->coefficients.per_decode_seq_ms, 1.5, 0.15);
  EXPECT_EQ(noisy->points[0].samples, 5);
  EXPECT_LT(noisy->mape, 0.05);
  EXPECT_GT(noisy->r2, 0.99);
}

TEST(CostFitTest, HoldsCoefficientsNonNegativeAndRefusesTooLittleData) {
  // Times that an unconstrained fit would explain with a negative base:
  // t = 0.5 ms per prefill token - 2 ms. The constrained fit keeps base at 0.
  std::vector<StepSample> samples;
  for (int64_t p : {16, 32, 64, 128, 256}) {
    samples.push_back({Prefill(p, 0), static_cast<int64_t>((0.5 * static_cast<double>(p) - 2) * 1e6)});
  }
  // Decodes at 1 ms each plus 1 us per context position: exact with base 0.
  samples.push_back({Decode(1, 100), 1100000});
  samples.push_back({Decode(8, 100), 8800000});
  samples.push_back({Decode(8, 500), 12000000});
  auto fit = FitLinearCostModel(samples);
  ASSERT_TRUE(fit.ok()) << fit.status().ToString();
  for (const CoefficientKey& k : LinearCoefficientKeys()) EXPECT_GE(fit->coefficients.*k.field, 0) << k.key;
  EXPECT_EQ(fit->coefficients.base_ms, 0);
  EXPECT_GT(fit->coefficients.per_prefill_token_ms, 0.4);

  EXPECT_FALSE(FitLinearCostModel({}).ok());
  EXPECT_FALSE(FitLinearCostModel({{Prefill(16, 0), 0}}).ok());  // a time of 0
  // Two shapes for more determinable coefficients than that.
  auto few = FitLinearCostModel({{Prefill(16, 0), 1000}, {Decode(2, 40), 2000}});
  ASSERT_FALSE(few.ok());
  EXPECT_NE(few.status().message().find("distinct step shapes"), std::string::npos) << few.status().message();
}

TEST(CostFitTest, JsonRoundTripsWithProvenanceAndRefusesByField) {
  LinearCoefficients c;
  c.base_ms = 2.5;
  c.per_prefill_token_ms = 0.125;
  c.per_decode_context_ms = 3e-4;
  const std::string text = LinearCostModel(c).ToJson(R"({"machine": {"cpu": "x"}, "fit": {"r2": 0.99}})");
  auto back = LinearCostModel::FromJson(text, "cal.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  for (const CoefficientKey& k : LinearCoefficientKeys()) EXPECT_EQ(back->coefficients().*k.field, c.*k.field) << k.key;
  EXPECT_NE(text.find("\"version\": 1"), std::string::npos) << text;
  EXPECT_NE(text.find("\"calibration\""), std::string::npos) << text;

  auto version = LinearCostModel::FromJson(R"({"model": "linear", "version": 2})", "cal.json");
  ASSERT_FALSE(version.ok());
  EXPECT_NE(version.status().message().find("'version'"), std::string::npos) << version.status().message();
  EXPECT_NE(version.status().message().find("cal.json"), std::string::npos);
  auto cal = LinearCostModel::FromJson(R"({"model": "linear", "calibration": 3})", "cal.json");
  ASSERT_FALSE(cal.ok());
  EXPECT_NE(cal.status().message().find("'calibration'"), std::string::npos) << cal.status().message();
  auto field = LinearCostModel::FromJson(R"({"model": "linear", "version": 1, "per_decode_seq_ms": "2"})", "cal.json");
  ASSERT_FALSE(field.ok());
  EXPECT_NE(field.status().message().find("'per_decode_seq_ms'"), std::string::npos) << field.status().message();
  // A file from before versions were written reads as version 1.
  EXPECT_TRUE(LinearCostModel::FromJson(R"({"model": "linear", "base_ms": 1})", "old.json").ok());
}

}  // namespace
}  // namespace tessera::sim
