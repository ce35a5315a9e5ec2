// The acceptance rule keeps the output distribution exactly the target's.
// Chi-square goodness of fit at a fixed seed set (deterministic: the uniforms
// are counter-based), for the q-rule on synthetic distributions and for
// VerifyDrafts over sampler configs (temperature, top-p, top-k, min-p), with
// draft-model proposals (q) and point-mass proposals; plus a negative control
// showing the test detects a wrong rule.
#include "runtime/spec/acceptance.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

namespace tessera {
namespace {

constexpr int kVocab = 12;
constexpr int kDraws = 20000;

// Upper 0.1% point of chi-square with `df` degrees of freedom (Wilson-Hilferty).
double ChiSquareCritical(int df) {
  const double z = 3.090;  // standard normal 0.999 quantile
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// Pearson's statistic of observed counts against expected probabilities;
// cells with expected count < 5 are pooled. `df` gets the degrees of freedom.
double ChiSquare(const std::vector<int>& counts, const std::vector<double>& p, int total, int* df) {
  double stat = 0.0, pooled_obs = 0.0, pooled_exp = 0.0;
  int cells = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * total;
    if (e < 5.0) {
      pooled_obs += counts[i];
      pooled_exp += e;
      if (p[i] == 0.0 && counts[i] > 0) return 1e9;  // impossible token drawn
      continue;
    }
    stat += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  if (pooled_exp >= 5.0) {
    stat += (pooled_obs - pooled_exp) * (pooled_obs - pooled_exp) / pooled_exp;
    ++cells;
  }
  *df = std::max(1, cells - 1);
  return stat;
}

std::vector<double> RandomDist(std::mt19937& rng, int n, double sharpness) {
  std::gamma_distribution<double> g(sharpness, 1.0);
  std::vector<double> p(n);
  double s = 0;
  for (double& x : p) s += (x = g(rng));
  for (double& x : p) x /= s;
  return p;
}

int Draw(const std::vector<double>& p, double u) {
  double cum = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    cum += p[i];
    if (u < cum) return static_cast<int>(i);
  }
  return static_cast<int>(p.size()) - 1;
}

TEST(AcceptanceRuleTest, ResidualRuleGivesTheTargetDistribution) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 4; ++trial) {
    const std::vector<double> p = RandomDist(rng, kVocab, 0.5), qd = RandomDist(rng, kVocab, 0.5);
    const std::vector<float> q(qd.begin(), qd.end());
    std::vector<double> qn(q.begin(), q.end());
    std::vector<int> counts(kVocab, 0);
    int accepted_n = 0;
    for (int n = 0; n < kDraws; ++n) {
      const int d = Draw(qn, DraftUniform(100 + trial, 0, n));
      bool accepted = false;
      ++counts[AcceptOrResample(p, q, d, AcceptUniform(100 + trial, 0, n), ResidualUniform(100 + trial, 0, n),
                                &accepted)];
      accepted_n += accepted;
    }
    int df = 0;
    const double stat = ChiSquare(counts, p, kDraws, &df);
    EXPECT_LT(stat, ChiSquareCritical(df)) << "trial " << trial;
    // Acceptance rate is sum(min(p, q)).
    double expect_acc = 0;
    for (int i = 0; i < kVocab; ++i) expect_acc += std::min(p[i], qn[i]);
    EXPECT_NEAR(static_cast<double>(accepted_n) / kDraws, expect_acc, 0.02);
  }
}

TEST(AcceptanceRuleTest, NegativeControlAlwaysAcceptIsDetected) {
  std::mt19937 rng(8);
  const std::vector<double> p = RandomDist(rng, kVocab, 0.5), q = RandomDist(rng, kVocab, 0.5);
  std::vector<int> counts(kVocab, 0);
  for (int n = 0; n < kDraws; ++n) ++counts[Draw(q, DraftUniform(5, 0, n))];  // accept every draft
  int df = 0;
  const double stat = ChiSquare(counts, p, kDraws, &df);
  EXPECT_GT(stat, ChiSquareCritical(df));
}

struct Case {
  const char* name;
  SamplerConfig config;
};

std::vector<Case> Configs() {
  std::vector<Case> cases;
  SamplerConfig c;
  c.temperature = 1.0f;
  cases.push_back({"temperature1", c});
  c.temperature = 0.7f;
  cases.push_back({"temperature0.7", c});
  c = SamplerConfig{};
  c.temperature = 1.0f;
  c.top_p = 0.8f;
  cases.push_back({"top_p", c});
  c = SamplerConfig{};
  c.temperature = 1.2f;
  c.top_k = 4;
  cases.push_back({"top_k", c});
  c = SamplerConfig{};
  c.temperature = 1.0f;
  c.min_p = 0.1f;
  cases.push_back({"min_p", c});
  return cases;
}

// VerifyDrafts with one draft: the first emitted token is distributed as the
// sampler's distribution of row 0, whichever proposal; the second (when the
// draft is accepted, the bonus row) as row 1's.
TEST(AcceptanceRuleTest, VerifyDraftsKeepsSamplerDistributions) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  std::vector<float> target(2 * kVocab), draft(kVocab);
  for (float& x : target) x = nd(rng);
  for (float& x : draft) x = nd(rng);
  Sampler sampler;
  for (const Case& cs : Configs()) {
    for (bool with_q : {true, false}) {
      const std::vector<double> p0 = sampler.Distribution(std::span<const float>(target).first(kVocab), cs.config, {});
      const std::vector<double> p1 = sampler.Distribution(std::span<const float>(target).last(kVocab), cs.config, {});
      const std::vector<double> qd = sampler.Distribution(draft, cs.config, {});
      std::vector<int> first(kVocab, 0), second(kVocab, 0);
      int accepted = 0;
      for (int n = 0; n < kDraws; ++n) {
        SamplerConfig c = cs.config;
        c.seed = 1000 + n;
        // Draft: sampled from q (draft model), or its argmax (point mass).
        int32_t d = 0;
        if (with_q) {
          d = Draw(qd, DraftUniform(c.seed, 0, 0));
        } else {
          for (int i = 1; i < kVocab; ++i) d = qd[i] > qd[d] ? i : d;
        }
        const std::vector<int32_t> drafts = {d};
        const std::vector<std::vector<float>> q = {std::vector<float>(qd.begin(), qd.end())};
        VerifyInput in;
        in.logits = target;
        in.vocab = kVocab;
        in.drafts = drafts;
        if (with_q) in.draft_probs = q;
        in.config = &c;
        VerifyResult r = VerifyDrafts(sampler, in);
        ASSERT_GE(r.tokens.size(), 1u);
        ++first[r.tokens[0].token];
        if (r.num_accepted == 1) {
          ASSERT_EQ(r.tokens.size(), 2u);
          ++second[r.tokens[1].token];
          ++accepted;
        }
      }
      int df = 0;
      const double s0 = ChiSquare(first, p0, kDraws, &df);
      EXPECT_LT(s0, ChiSquareCritical(df)) << cs.name << (with_q ? " q" : " point mass");
      const double s1 = ChiSquare(second, p1, accepted, &df);
      EXPECT_LT(s1, ChiSquareCritical(df)) << cs.name << (with_q ? " q" : " point mass") << " bonus";
    }
  }
}

// Point-mass verification draws exactly what plain sampling draws: a seeded
// request's tokens do not change with speculation.
TEST(AcceptanceRuleTest, PointMassMatchesPlainSamplingBitwise) {
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> rows(4 * kVocab);
  for (float& x : rows) x = nd(rng);
  Sampler sampler;
  for (int n = 0; n < 500; ++n) {
    SamplerConfig c;
    c.temperature = 0.9f;
    c.top_p = 0.95f;
    c.seed = 77 + n;
    c.logprobs = true;
    c.top_logprobs = 2;
    const std::vector<int32_t> output = {3, 5};
    // Plain: three single steps, each appending its token.
    std::vector<int32_t> plain_out = output;
    std::vector<int32_t> plain;
    for (int i = 0; i < 3; ++i) {
      SampleContext ctx;
      ctx.output_tokens = plain_out;
      ctx.output_position = static_cast<int64_t>(plain_out.size());
      const int32_t t = sampler.Sample(std::span<const float>(rows).subspan(i * kVocab, kVocab), c, ctx).token;
      plain.push_back(t);
      plain_out.push_back(t);
    }
    // Speculative: drafts = the plain tokens except (for odd n) a wrong second one.
    std::vector<int32_t> drafts = {plain[0], plain[1]};
    if (n % 2) drafts[1] = (plain[1] + 1) % kVocab;
    VerifyInput in;
    in.logits = std::span<const float>(rows).first(3 * kVocab);
    in.vocab = kVocab;
    in.drafts = drafts;
    in.config = &c;
    in.output_tokens = output;
    VerifyResult r = VerifyDrafts(sampler, in);
    ASSERT_EQ(r.num_accepted, n % 2 ? 1 : 2);
    for (size_t i = 0; i < r.tokens.size(); ++i) EXPECT_EQ(r.tokens[i].token, plain[i]) << n;
    EXPECT_EQ(r.tokens[0].top.size(), 2u);
  }
}

}  // namespace
}  // namespace tessera
