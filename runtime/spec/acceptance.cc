#include "runtime/spec/acceptance.h"

#include <algorithm>
#include <cmath>

namespace tessera {
namespace {

constexpr float kGreedyTemperature = 1e-5f;  // as engine/sampling.cc
constexpr uint64_t kDraftStream = uint64_t{1} << 32;
constexpr uint64_t kAcceptStream = uint64_t{2} << 32;
constexpr uint64_t kResidualStream = uint64_t{3} << 32;

uint64_t Stream(uint64_t tag, int32_t choice) { return tag | static_cast<uint32_t>(choice); }

void FillLogprobs(std::span<const float> row, const SamplerConfig& c, SampleResult* r) {
  if (!c.logprobs && c.top_logprobs <= 0) return;
  const double lse = LogSumExp(row);
  r->logprob = static_cast<float>(row[r->token] - lse);
  r->top = TopLogprobs(row, c.top_logprobs, lse);
}

}  // namespace

double DraftUniform(uint64_t seed, int32_t choice, int64_t pos) {
  return CounterUniform(seed, Stream(kDraftStream, choice), static_cast<uint64_t>(pos));
}
double AcceptUniform(uint64_t seed, int32_t choice, int64_t pos) {
  return CounterUniform(seed, Stream(kAcceptStream, choice), static_cast<uint64_t>(pos));
}
double ResidualUniform(uint64_t seed, int32_t choice, int64_t pos) {
  return CounterUniform(seed, Stream(kResidualStream, choice), static_cast<uint64_t>(pos));
}

int32_t AcceptOrResample(std::span<const double> p, std::span<const float> q, int32_t draft, double u_accept,
                         double u_residual, bool* accepted) {
  const double qd = q[draft];
  // q(d) > 0 always for a drawn draft; p(d) >= q(d) accepts surely.
  if (qd <= 0.0 || u_accept * qd < p[draft]) {
    *accepted = true;
    return draft;
  }
  *accepted = false;
  double mass = 0.0;
  for (size_t i = 0; i < p.size(); ++i) mass += std::max(0.0, p[i] - static_cast<double>(q[i]));
  if (!(mass > 0.0)) {  // p == q up to rounding: the residual is p itself
    double cum = 0.0;
    for (size_t i = 0; i < p.size(); ++i) {
      cum += p[i];
      if (u_residual < cum) return static_cast<int32_t>(i);
    }
    return draft;
  }
  const double target = u_residual * mass;
  double cum = 0.0;
  int32_t last = draft;
  for (size_t i = 0; i < p.size(); ++i) {
    const double r = std::max(0.0, p[i] - static_cast<double>(q[i]));
    if (r <= 0.0) continue;
    last = static_cast<int32_t>(i);
    cum += r;
    if (target < cum) return last;
  }
  return last;
}

VerifyResult VerifyDrafts(Sampler& sampler, const VerifyInput& in) {
  VerifyResult res;
  const SamplerConfig& c = *in.config;
  const int64_t k = static_cast<int64_t>(in.drafts.size());
  const int64_t n_out = static_cast<int64_t>(in.output_tokens.size());
  const bool q_rule = !in.draft_probs.empty() && c.temperature >= kGreedyTemperature;
  // Output so far plus the drafts accepted before each row (penalties see them).
  std::vector<int32_t> output(in.output_tokens.begin(), in.output_tokens.end());
  output.insert(output.end(), in.drafts.begin(), in.drafts.end());
  for (int64_t i = 0; i <= k; ++i) {
    const std::span<const float> row = in.logits.subspan(static_cast<size_t>(i * in.vocab), static_cast<size_t>(in.vocab));
    SampleContext ctx;
    ctx.prompt_tokens = in.prompt_tokens;
    ctx.output_tokens = std::span<const int32_t>(output).first(static_cast<size_t>(n_out + i));
    if (n_out + i < in.min_tokens) ctx.banned_tokens = in.banned_tokens;
    ctx.choice_index = in.choice_index;
    ctx.output_position = n_out + i;
    if (i < k && q_rule) {
      const std::vector<double> p = sampler.Distribution(row, c, ctx);
      bool accepted = false;
      SampleResult r;
      r.token = AcceptOrResample(p, in.draft_probs[i], in.drafts[i], AcceptUniform(c.seed, in.choice_index, n_out + i),
                                 ResidualUniform(c.seed, in.choice_index, n_out + i), &accepted);
      FillLogprobs(row, c, &r);
      res.tokens.push_back(std::move(r));
      if (!accepted) break;
      ++res.num_accepted;
      continue;
    }
    // Point mass (or the bonus row): what plain decoding draws here.
    SampleResult r = sampler.Sample(row, c, ctx);
    const bool accepted = i < k && r.token == in.drafts[i];
    res.tokens.push_back(std::move(r));
    if (!accepted) break;
    ++res.num_accepted;
  }
  return res;
}

}  // namespace tessera
