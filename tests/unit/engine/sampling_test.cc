// Sampler: exact unit checks of each processing stage, and chi-square tests
// (fixed seeds, bounded sample counts, so deterministic) that temperature,
// top-k, top-p and min-p draw from the intended distributions.
#include "engine/sampling.h"

#include <cmath>
#include <map>
#include <numeric>

#include <gtest/gtest.h>

namespace tessera {
namespace {

const std::vector<float> kLogits = {1.0f, 2.5f, 0.3f, -1.0f, 2.0f, 0.0f, 1.7f, -0.5f};

std::vector<double> Softmax(const std::vector<float>& l, double t) {
  double mx = *std::max_element(l.begin(), l.end());
  std::vector<double> p(l.size());
  double s = 0;
  for (size_t i = 0; i < l.size(); ++i) s += p[i] = std::exp((l[i] - mx) / t);
  for (double& x : p) x /= s;
  return p;
}

std::vector<double> Renorm(std::vector<double> p, const std::vector<bool>& keep) {
  double s = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (!keep[i]) p[i] = 0;
    s += p[i];
  }
  for (double& x : p) x /= s;
  return p;
}

// Draws `n` tokens (output positions 0..n-1) and returns the chi-square
// statistic against `expected`; also fails on any draw with expected 0.
double ChiSquare(const SamplerConfig& config, const std::vector<double>& expected, int n, int* df) {
  Sampler sampler;
  std::vector<int> counts(expected.size(), 0);
  for (int i = 0; i < n; ++i) {
    SampleContext ctx;
    ctx.output_position = i;
    const int32_t t = sampler.Sample(kLogits, config, ctx).token;
    EXPECT_GT(expected[t], 0.0) << "token " << t << " is outside the kept set";
    ++counts[t];
  }
  double chi = 0;
  *df = -1;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] == 0) continue;
    const double e = expected[i] * n;
    chi += (counts[i] - e) * (counts[i] - e) / e;
    ++*df;
  }
  return chi;
}

// Chi-square critical values at p = 0.001.
double Critical(int df) {
  static const double kTable[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32};
  return kTable[df];
}

void ExpectDistribution(const SamplerConfig& config, const std::vector<double>& expected) {
  Sampler sampler;
  const std::vector<double> dist = sampler.Distribution(kLogits, config, {});
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(dist[i], expected[i], 1e-6) << "token " << i;
  int df = 0;
  const double chi = ChiSquare(config, expected, 20000, &df);
  ASSERT_GE(df, 1);
  EXPECT_LT(chi, Critical(df)) << "df " << df;
}

TEST(SamplerStatTest, Temperature) {
  for (float t : {0.5f, 1.0f, 1.7f}) {
    SamplerConfig c;
    c.temperature = t;
    c.seed = 7;
    ExpectDistribution(c, Softmax(kLogits, t));
  }
}

TEST(SamplerStatTest, TopK) {
  SamplerConfig c;
  c.top_k = 3;
  c.seed = 11;
  // Top three logits: 2.5 (1), 2.0 (4), 1.7 (6).
  ExpectDistribution(c, Renorm(Softmax(kLogits, 1.0), {false, true, false, false, true, false, true, false}));
}

TEST(SamplerStatTest, TopP) {
  SamplerConfig c;
  c.top_p = 0.7f;
  c.temperature = 0.8f;
  c.seed = 13;
  const std::vector<double> p = Softmax(kLogits, 0.8);
  std::vector<size_t> order(p.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  std::vector<bool> keep(p.size(), false);
  double cum = 0;
  for (size_t o : order) {
    if (cum >= 0.7) break;
    keep[o] = true;
    cum += p[o];
  }
  ExpectDistribution(c, Renorm(p, keep));
}

TEST(SamplerStatTest, MinP) {
  SamplerConfig c;
  c.min_p = 0.2f;
  c.seed = 17;
  const std::vector<double> p = Softmax(kLogits, 1.0);
  const double pmax = *std::max_element(p.begin(), p.end());
  std::vector<bool> keep(p.size());
  for (size_t i = 0; i < p.size(); ++i) keep[i] = p[i] >= 0.2 * pmax;
  ExpectDistribution(c, Renorm(p, keep));
}

TEST(SamplerStatTest, TopKThenTopP) {
  SamplerConfig c;
  c.top_k = 4;
  c.top_p = 0.6f;
  c.seed = 19;
  // Top 4: tokens 1 (2.5), 4 (2.0), 6 (1.7), 0 (1.0); renormalised, then top_p.
  const std::vector<double> p = Renorm(Softmax(kLogits, 1.0), {true, true, false, false, true, false, true, false});
  std::vector<bool> keep(p.size(), false);
  double cum = 0;
  for (size_t o : {1, 4, 6, 0}) {
    if (cum >= 0.6) break;
    keep[o] = true;
    cum += p[o];
  }
  ExpectDistribution(c, Renorm(p, keep));
}

TEST(SamplerTest, GreedyTakesLowestIndexOnTies) {
  Sampler s;
  SamplerConfig c;
  c.temperature = 0.0f;
  const std::vector<float> row = {0.5f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(s.Sample(row, c, {}).token, 1);
  c.logit_bias = {{3, 0.1f}};
  EXPECT_EQ(s.Sample(row, c, {}).token, 3);
  const std::vector<int32_t> banned = {1, 3};
  SampleContext ctx;
  ctx.banned_tokens = banned;
  c.logit_bias.clear();
  EXPECT_EQ(s.Sample(row, c, ctx).token, 0);
}

TEST(SamplerTest, PenaltiesFollowVllm) {
  Sampler s;
  SamplerConfig c;
  c.temperature = 1.0f;
  c.repetition_penalty = 2.0f;
  c.frequency_penalty = 0.5f;
  c.presence_penalty = 0.25f;
  const std::vector<float> row = {2.0f, -2.0f, 1.0f, 0.0f};
  const std::vector<int32_t> prompt = {0, 0};
  const std::vector<int32_t> output = {1, 2, 2};
  SampleContext ctx;
  ctx.prompt_tokens = prompt;
  ctx.output_tokens = output;
  const std::vector<double> d = s.Distribution(row, c, ctx);
  // token 0: prompt only -> 2/2 = 1; token 1: -2*2 - 0.5 - 0.25 = -4.75;
  // token 2: 1/2 - 2*0.5 - 0.25 = -0.75; token 3 untouched 0.
  EXPECT_NEAR(d[1] / d[0], std::exp(-4.75 - 1.0), 1e-6);
  EXPECT_NEAR(d[2] / d[0], std::exp(-0.75 - 1.0), 1e-6);
  EXPECT_NEAR(d[3] / d[0], std::exp(0.0 - 1.0), 1e-6);
  // A second call with the same history gives the same (scratch is reset).
  EXPECT_EQ(d, s.Distribution(row, c, ctx));
}

TEST(SamplerTest, SeededDrawsDependOnlyOnSeedIndexPosition) {
  SamplerConfig c;
  c.seed = 42;
  Sampler a, b;
  std::vector<int32_t> first;
  for (int i = 0; i < 64; ++i) {
    SampleContext ctx;
    ctx.output_position = i;
    first.push_back(a.Sample(kLogits, c, ctx).token);
  }
  // Interleave other configs on `b`; same (seed, index, position) -> same token.
  for (int i = 63; i >= 0; --i) {
    SamplerConfig other;
    other.seed = 1000 + i;
    b.Sample(kLogits, other, {});
    SampleContext ctx;
    ctx.output_position = i;
    EXPECT_EQ(b.Sample(kLogits, c, ctx).token, first[i]);
  }
  // Another choice index is another stream.
  int differ = 0;
  for (int i = 0; i < 64; ++i) {
    SampleContext ctx;
    ctx.output_position = i;
    ctx.choice_index = 1;
    differ += a.Sample(kLogits, c, ctx).token != first[i];
  }
  EXPECT_GT(differ, 10);
}

TEST(SamplerTest, LogprobsAreRawLogSoftmax) {
  Sampler s;
  SamplerConfig c;
  c.temperature = 0.0f;
  c.logprobs = true;
  c.top_logprobs = 3;
  c.logit_bias = {{7, 50.0f}};  // processed logits pick 7; logprobs stay raw
  const SampleResult r = s.Sample(kLogits, c, {});
  EXPECT_EQ(r.token, 7);
  const std::vector<double> p = Softmax(kLogits, 1.0);
  EXPECT_NEAR(r.logprob, std::log(p[7]), 1e-5);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 4);
  EXPECT_EQ(r.top[2].token, 6);
  EXPECT_NEAR(r.top[0].logprob, std::log(p[1]), 1e-5);
}

TEST(SamplerTest, CounterUniformIsInRangeAndSpread) {
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = CounterUniform(3, 0, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Structured output: only allowed tokens are ever drawn, greedy or not, and a
// mask whose allowed tokens are all -inf falls back to the best allowed raw logit.
TEST(SamplerMaskTest, OnlyAllowedTokens) {
  std::vector<float> logits = {5.0f, 1.0f, 4.0f, 0.5f, 3.0f, -1.0f, 2.0f, 0.0f, 6.0f, -2.0f};
  std::vector<uint32_t> mask = {(1u << 2) | (1u << 5) | (1u << 7)};
  Sampler s;
  SampleContext ctx;
  ctx.allowed_tokens = mask;
  SamplerConfig greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(s.Sample(logits, greedy, ctx).token, 2);
  SamplerConfig hot;
  hot.temperature = 2.0f;
  for (int64_t pos = 0; pos < 200; ++pos) {
    ctx.output_position = pos;
    const int32_t t = s.Sample(logits, hot, ctx).token;
    EXPECT_TRUE(t == 2 || t == 5 || t == 7) << t;
  }
  SamplerConfig banned = greedy;
  banned.logit_bias = {{2, -std::numeric_limits<float>::infinity()}, {5, -std::numeric_limits<float>::infinity()},
                       {7, -std::numeric_limits<float>::infinity()}};
  EXPECT_EQ(s.Sample(logits, banned, ctx).token, 2);  // every allowed token -inf: best allowed raw logit
  ctx.allowed_tokens = {};
  EXPECT_EQ(s.Sample(logits, greedy, ctx).token, 8);  // no mask: unconstrained
}

}  // namespace
}  // namespace tessera
