#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tessera {
namespace {

constexpr float kGreedyTemperature = 1e-5f;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Lowest index among the maxima; NaN never wins.
int32_t Argmax(std::span<const float> row) {
  int32_t best = 0;
  float best_v = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < row.size(); ++i) {
    if (row[i] > best_v) {
      best_v = row[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

bool Allowed(std::span<const uint32_t> mask, int64_t t) {
  return static_cast<size_t>(t >> 5) < mask.size() && ((mask[t >> 5] >> (t & 31)) & 1);
}

// The allowed token with the highest raw logit (lowest id on ties); the
// lowest allowed id when every allowed logit is -inf or NaN; 0 if none.
int32_t AllowedArgmax(std::span<const float> logits, std::span<const uint32_t> mask) {
  int32_t best = -1;
  float best_v = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!Allowed(mask, static_cast<int64_t>(i))) continue;
    if (best < 0) best = static_cast<int32_t>(i);
    if (logits[i] > best_v) {
      best_v = logits[i];
      best = static_cast<int32_t>(i);
    }
  }
  return std::max(best, 0);
}

}  // namespace

double CounterUniform(uint64_t seed, uint64_t stream, uint64_t counter) {
  uint64_t h = SplitMix64(seed);
  h = SplitMix64(h ^ (stream * 0xd1b54a32d192ed03ULL));
  h = SplitMix64(h ^ (counter * 0xabc98388fb8fac03ULL));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

double LogSumExp(std::span<const float> logits) {
  float mx = -std::numeric_limits<float>::infinity();
  for (float v : logits) mx = std::max(mx, v);
  if (!std::isfinite(mx)) return mx;
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  return mx + std::log(sum);
}

std::vector<TokenLogprob> TopLogprobs(std::span<const float> logits, int32_t k, double lse) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  k = static_cast<int32_t>(std::min<int64_t>(std::max(k, 0), vocab));
  std::vector<TokenLogprob> out;
  if (k == 0) return out;
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  out.reserve(static_cast<size_t>(k));
  for (int32_t i = 0; i < k; ++i) {
    out.push_back({idx[i], static_cast<float>(logits[idx[i]] - lse)});
  }
  return out;
}

int32_t Sampler::Process(std::span<const float> logits, const SamplerConfig& c, const SampleContext& ctx) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  auto in_vocab = [vocab](int32_t t) { return t >= 0 && t < vocab; };
  work_.assign(logits.begin(), logits.end());
  const bool masked = !ctx.allowed_tokens.empty();
  if (masked) {
    for (int64_t t = 0; t < vocab; ++t) {
      if (!Allowed(ctx.allowed_tokens, t)) work_[t] = -std::numeric_limits<float>::infinity();
    }
  }
  for (int32_t t : ctx.banned_tokens) {
    if (in_vocab(t)) work_[t] = -std::numeric_limits<float>::infinity();
  }
  for (const auto& [t, bias] : c.logit_bias) {
    if (in_vocab(t)) work_[t] += bias;
  }

  // Penalties (vLLM): repetition over prompt + output, divides positive
  // logits and multiplies negative ones; frequency/presence over output only.
  const bool rep = c.repetition_penalty != 1.0f;
  const bool freq = c.frequency_penalty != 0.0f || c.presence_penalty != 0.0f;
  if (rep || freq) {
    counts_.resize(static_cast<size_t>(vocab), 0);
    // counts_[t]: output occurrences in the low 30 bits; bit 30: penalised already.
    constexpr int32_t kDone = 1 << 30;
    for (int32_t t : ctx.output_tokens) {
      if (in_vocab(t)) ++counts_[t];
    }
    auto penalise = [&](int32_t t) {
      if (!in_vocab(t) || (counts_[t] & kDone)) return;
      const int32_t n = counts_[t];
      float& v = work_[t];
      if (rep) v = v > 0 ? v / c.repetition_penalty : v * c.repetition_penalty;
      if (n > 0) v -= c.frequency_penalty * static_cast<float>(n) + c.presence_penalty;
      counts_[t] |= kDone;
    };
    if (rep) {
      for (int32_t t : ctx.prompt_tokens) penalise(t);
    }
    for (int32_t t : ctx.output_tokens) penalise(t);
    for (int32_t t : ctx.prompt_tokens) {
      if (in_vocab(t)) counts_[t] = 0;
    }
    for (int32_t t : ctx.output_tokens) {
      if (in_vocab(t)) counts_[t] = 0;
    }
  }

  if (c.temperature < kGreedyTemperature) {
    const int32_t best = Argmax(work_);
    if (masked && !(work_[best] > -std::numeric_limits<float>::infinity())) {
      return AllowedArgmax(logits, ctx.allowed_tokens);
    }
    return best;
  }

  float mx = -std::numeric_limits<float>::infinity();
  for (float& v : work_) {
    v /= c.temperature;
    mx = std::max(mx, v);
  }
  if (!std::isfinite(mx)) {  // everything masked: fall back to the raw argmax (of the allowed tokens)
    return masked ? AllowedArgmax(logits, ctx.allowed_tokens) : Argmax(logits);
  }

  // Unnormalised weights e_i = exp(w_i - max); min_p keeps e_i >= min_p * e_max = min_p.
  cand_.clear();
  probs_.clear();
  for (int64_t i = 0; i < vocab; ++i) {
    const double e = std::exp(static_cast<double>(work_[i]) - mx);
    if (e > 0.0 && e >= c.min_p) {
      cand_.push_back(static_cast<int32_t>(i));
      probs_.push_back(e);
    }
  }
  // top_k keeps every token tied with the k-th largest (as vLLM's threshold mask).
  if (c.top_k > 0 && static_cast<size_t>(c.top_k) < cand_.size()) {
    std::vector<double> vals = probs_;
    std::nth_element(vals.begin(), vals.begin() + (c.top_k - 1), vals.end(), std::greater<>());
    const double kth = vals[c.top_k - 1];
    size_t w = 0;
    for (size_t i = 0; i < cand_.size(); ++i) {
      if (probs_[i] >= kth) {
        cand_[w] = cand_[i];
        probs_[w++] = probs_[i];
      }
    }
    cand_.resize(w);
    probs_.resize(w);
  }
  double sum = 0.0;
  for (double p : probs_) sum += p;
  for (double& p : probs_) p /= sum;
  // top_p: most likely first, keep while the mass before a token is < top_p.
  if (c.top_p < 1.0f) {
    std::vector<size_t> order(cand_.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return probs_[a] > probs_[b] || (probs_[a] == probs_[b] && cand_[a] < cand_[b]);
    });
    std::vector<int32_t> kept;
    std::vector<double> kept_p;
    double cum = 0.0;
    for (size_t o : order) {
      if (!kept.empty() && cum >= c.top_p) break;
      kept.push_back(cand_[o]);
      kept_p.push_back(probs_[o]);
      cum += probs_[o];
    }
    cand_ = std::move(kept);
    probs_ = std::move(kept_p);
    for (double& p : probs_) p /= cum;
  }
  return -1;
}

SampleResult Sampler::Sample(std::span<const float> logits, const SamplerConfig& c, const SampleContext& ctx) {
  SampleResult r;
  const int32_t greedy = Process(logits, c, ctx);
  if (greedy >= 0) {
    r.token = greedy;
  } else {
    const double u = CounterUniform(c.seed, static_cast<uint64_t>(ctx.choice_index),
                                    static_cast<uint64_t>(ctx.output_position));
    r.token = cand_.back();
    double cum = 0.0;
    for (size_t i = 0; i < cand_.size(); ++i) {
      cum += probs_[i];
      if (u < cum) {
        r.token = cand_[i];
        break;
      }
    }
  }
  if (c.logprobs || c.top_logprobs > 0) {
    const double lse = LogSumExp(logits);
    r.logprob = static_cast<float>(logits[r.token] - lse);
    r.top = TopLogprobs(logits, c.top_logprobs, lse);
  }
  return r;
}

std::vector<double> Sampler::Distribution(std::span<const float> logits, const SamplerConfig& c,
                                          const SampleContext& ctx) {
  std::vector<double> dist(logits.size(), 0.0);
  const int32_t greedy = Process(logits, c, ctx);
  if (greedy >= 0) {
    dist[greedy] = 1.0;
  } else {
    for (size_t i = 0; i < cand_.size(); ++i) dist[cand_[i]] = probs_[i];
  }
  return dist;
}

}  // namespace tessera
