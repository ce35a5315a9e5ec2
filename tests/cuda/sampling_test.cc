// CUDA sampling kernels against the host Sampler (engine/sampling.h): the same
// token for the same (seed, choice, position), except where the draw lies
// within 1e-6 of a CDF boundary of the host distribution (sums are reduced in
// another order there); batch invariance checked row alone vs inside a batch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/sampling.h"
#include "kernels/cuda/sampling.cuh"
#include "tests/cuda/cuda_test_util.h"

namespace tessera::kernels {
namespace {

using cuda::SampleRowParams;
using cuda_test::DeviceBuffer;

#if defined(TESSERA_CUDA_EMU)
constexpr bool kEmu = true;  // fibers are slow: modest vocabularies
#else
constexpr bool kEmu = false;
#endif

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Case {
  std::string name;
  std::vector<float> logits;
  SamplerConfig config;
  std::vector<int32_t> prompt, output, banned;
  int32_t choice = 0;
  int64_t position = 0;
};

SampleContext ContextOf(const Case& c) {
  SampleContext ctx;
  ctx.prompt_tokens = c.prompt;
  ctx.output_tokens = c.output;
  ctx.banned_tokens = c.banned;
  ctx.choice_index = c.choice;
  ctx.output_position = c.position;
  return ctx;
}

// Appends one row's list to a CSR (offsets start with 0).
template <typename T>
void Append(std::vector<int32_t>& offsets, std::vector<T>& flat, const std::vector<T>& row) {
  flat.insert(flat.end(), row.begin(), row.end());
  offsets.push_back(static_cast<int32_t>(flat.size()));
}

// SampleRows over `cases` (one row each) in a single launch.
std::vector<int32_t> DeviceSample(const std::vector<Case>& cases, int64_t vocab) {
  const int64_t rows = static_cast<int64_t>(cases.size());
  std::vector<float> logits;
  std::vector<SampleRowParams> params;
  std::vector<int32_t> p_off{0}, p_tok, o_off{0}, o_tok, e_off{0}, e_tok;
  std::vector<float> e_val;
  for (const Case& c : cases) {
    logits.insert(logits.end(), c.logits.begin(), c.logits.end());
    SampleRowParams p;
    p.temperature = c.config.temperature;
    p.top_k = c.config.top_k;
    p.top_p = c.config.top_p;
    p.min_p = c.config.min_p;
    p.presence_penalty = c.config.presence_penalty;
    p.frequency_penalty = c.config.frequency_penalty;
    p.repetition_penalty = c.config.repetition_penalty;
    p.choice_index = c.choice;
    p.seed = c.config.seed;
    p.output_position = c.position;
    params.push_back(p);
    Append(p_off, p_tok, c.prompt);
    Append(o_off, o_tok, c.output);
    // Bans first, then biases: the host order.
    std::vector<int32_t> toks(c.banned);
    std::vector<float> vals(c.banned.size(), -kInf);
    for (const auto& [t, b] : c.config.logit_bias) {
      toks.push_back(t);
      vals.push_back(b);
    }
    Append(e_off, e_tok, toks);
    Append(e_off, e_val, vals);
    e_off.pop_back();  // one offsets entry per row
  }
  // Keep every buffer non-empty (a zero-length DeviceBuffer holds no pointer).
  p_tok.push_back(0);
  o_tok.push_back(0);
  e_tok.push_back(0);
  e_val.push_back(0.f);
  DeviceBuffer<float> d_logits(logits);
  DeviceBuffer<SampleRowParams> d_params(params);
  DeviceBuffer<int32_t> d_poff(p_off), d_ptok(p_tok), d_ooff(o_off), d_otok(o_tok), d_eoff(e_off), d_etok(e_tok);
  DeviceBuffer<float> d_eval(e_val);
  const size_t ws_bytes = cuda::SampleRowsWorkspaceBytes(rows, vocab);
  DeviceBuffer<unsigned char> ws(ws_bytes);
  DeviceBuffer<int32_t> out(static_cast<size_t>(rows));
  EXPECT_EQ(cuda::SampleRows(d_logits.get(), rows, vocab, d_params.get(), {d_poff.get(), d_ptok.get()},
                             {d_ooff.get(), d_otok.get()}, {d_eoff.get(), d_etok.get(), d_eval.get()}, ws.get(),
                             ws_bytes, out.get(), nullptr),
            cudaSuccess);
  return out.Download();
}

// True when u is within 1e-6 of a boundary of the host's cumulative
// distribution, walked in the host's order (index order; by probability when
// top_p < 1): device and host may then legitimately pick neighbours.
bool NearBoundary(const std::vector<double>& dist, const SamplerConfig& config, double u) {
  std::vector<int32_t> order;
  for (size_t i = 0; i < dist.size(); ++i) {
    if (dist[i] > 0.0) order.push_back(static_cast<int32_t>(i));
  }
  if (config.top_p < 1.0f) {
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return dist[a] > dist[b]; });
  }
  double cum = 0.0;
  for (int32_t i : order) {
    cum += dist[i];
    if (std::fabs(cum - u) < 1e-6) return true;
  }
  return false;
}

std::vector<float> RandomRow(int64_t vocab, std::mt19937& rng, float scale) {
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> v(static_cast<size_t>(vocab));
  for (auto& x : v) x = nd(rng);
  return v;
}

std::vector<int32_t> RandomTokens(int n, int64_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

// Every knob of the sampler, a few draws (seed, choice, position) each.
std::vector<Case> SamplingCases(int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Case> base;
  auto add = [&](const std::string& name, SamplerConfig c, float scale = 2.5f) {
    Case k;
    k.name = name;
    k.config = std::move(c);
    k.logits = RandomRow(vocab, rng, scale);
    base.push_back(std::move(k));
    return &base.back();
  };
  SamplerConfig c;
  add("default", c);
  c = {};
  c.temperature = 0.7f;
  add("temperature 0.7", c);
  c = {};
  c.temperature = 1.5f;
  c.top_k = 1;
  add("top_k 1", c);
  c = {};
  c.top_k = 20;
  add("top_k 20", c);
  c = {};
  c.top_k = static_cast<int32_t>(vocab) + 5;
  add("top_k > vocab", c);
  c = {};
  c.top_p = 0.9f;
  add("top_p 0.9", c);
  c = {};
  c.top_p = 0.5f;
  c.top_k = 50;
  add("top_p 0.5 top_k 50", c);
  c = {};
  c.min_p = 0.05f;
  add("min_p 0.05", c);
  c = {};
  c.temperature = 0.8f;
  c.min_p = 0.02f;
  c.top_p = 0.8f;
  c.top_k = 100;
  add("min_p top_k top_p", c);
  c = {};
  c.temperature = 5.0f;
  c.top_p = 0.99f;
  add("hot top_p 0.99", c, 1.0f);
  c = {};
  c.top_p = 1e-6f;
  add("top_p tiny", c);
  c = {};
  c.temperature = 1e-6f;
  c.presence_penalty = 0.4f;
  add("greedy by temperature", c);
  {
    c = {};
    c.presence_penalty = 0.5f;
    c.frequency_penalty = 0.3f;
    c.repetition_penalty = 1.3f;
    c.top_p = 0.95f;
    Case* k = add("all penalties", c, 1.5f);
    k->prompt = RandomTokens(300, vocab, rng);
    k->output = RandomTokens(200, vocab, rng);
    // Duplicates, out-of-vocab ids, and penalties on the likeliest tokens.
    const int32_t top = static_cast<int32_t>(std::max_element(k->logits.begin(), k->logits.end()) - k->logits.begin());
    for (int i = 0; i < 5; ++i) k->output.push_back(top);
    k->output.push_back(-1);
    k->prompt.push_back(static_cast<int32_t>(vocab) + 3);
    k->prompt.push_back(k->output[0]);
  }
  {
    c = {};
    c.repetition_penalty = 0.8f;
    Case* k = add("repetition < 1", c, 1.5f);
    k->prompt = RandomTokens(500, vocab, rng);
  }
  {
    c = {};
    c.frequency_penalty = -0.5f;
    c.min_p = 0.01f;
    Case* k = add("negative frequency", c, 1.5f);
    k->output = RandomTokens(100, vocab, rng);
  }
  {
    c = {};
    c.top_p = 0.95f;
    Case* k = add("bias and bans", c);
    const int32_t top = static_cast<int32_t>(std::max_element(k->logits.begin(), k->logits.end()) - k->logits.begin());
    k->banned = {top, 0, static_cast<int32_t>(vocab) + 1, -5};
    for (int32_t t : RandomTokens(40, vocab, rng)) k->config.logit_bias.push_back({t, 3.0f});
    const int32_t t0 = k->config.logit_bias[0].first;
    k->config.logit_bias.push_back({t0, -1.25f});  // a duplicate adds up
    k->config.logit_bias.push_back({top, 100.f});  // banned stays banned
    k->config.logit_bias.push_back({-3, 1.f});
  }
  {
    c = {};
    Case* k = add("all but three banned", c);
    for (int32_t t = 0; t < vocab; ++t) {
      if (t % 997 != 5) k->banned.push_back(t);
    }
  }
  {
    c = {};
    Case* k = add("all banned: raw argmax", c);
    for (int32_t t = 0; t < vocab; ++t) k->banned.push_back(t);
  }
  {
    c = {};
    c.top_k = 10;
    Case* k = add("ties top_k", c);
    for (auto& x : k->logits) x = std::round(x);  // integer logits: large tie groups
  }
  {
    c = {};
    c.top_p = 0.3f;
    Case* k = add("ties top_p", c);
    for (auto& x : k->logits) x = std::round(x);
  }
  {
    c = {};
    c.top_p = 0.7f;
    Case* k = add("-inf and NaN", c);
    for (size_t i = 0; i < k->logits.size(); i += 3) k->logits[i] = -kInf;
    for (size_t i = 1; i < k->logits.size(); i += 17) k->logits[i] = std::numeric_limits<float>::quiet_NaN();
  }

  // Eight draws per config (four for a large vocab on the emulator): the same
  // config and logits at other RNG coordinates.
  const int draws = kEmu && vocab > 8192 ? 4 : 8;
  std::vector<Case> cases;
  std::uniform_int_distribution<uint64_t> seeds;
  for (const Case& b : base) {
    for (int d = 0; d < draws; ++d) {
      Case k = b;
      k.config.seed = seeds(rng);
      k.choice = d % 3;
      k.position = static_cast<int64_t>(d * 7 + k.output.size());
      cases.push_back(std::move(k));
    }
  }
  return cases;
}

std::vector<int64_t> Vocabs() {
  if (kEmu) return {1543, 32000};
  return {1543, 32000, 151936, 262144};
}

TEST(CudaSamplingTest, ArgmaxRowsMatchesHostGreedy) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(11);
  for (int64_t vocab : {int64_t{1}, int64_t{7}, int64_t{1000}, Vocabs().back()}) {
    std::vector<std::vector<float>> rows;
    rows.push_back(RandomRow(vocab, rng, 1.f));
    std::vector<float> ties = RandomRow(vocab, rng, 1.f);
    for (auto& x : ties) x = std::round(x * 2.f);  // many equal maxima
    rows.push_back(ties);
    std::vector<float> masked = RandomRow(vocab, rng, 1.f);
    for (size_t i = 0; i < masked.size(); i += 2) masked[i] = -kInf;
    for (size_t i = 1; i < masked.size(); i += 5) masked[i] = std::numeric_limits<float>::quiet_NaN();
    rows.push_back(masked);
    rows.push_back(std::vector<float>(static_cast<size_t>(vocab), -kInf));
    rows.push_back(std::vector<float>(static_cast<size_t>(vocab), std::numeric_limits<float>::quiet_NaN()));
    std::vector<float> pinf = RandomRow(vocab, rng, 1.f);
    pinf[pinf.size() / 2] = kInf;
    pinf.back() = kInf;
    rows.push_back(pinf);
    std::vector<float> last = RandomRow(vocab, rng, 1.f);
    last.back() = 50.f;  // the maximum at the very end
    rows.push_back(last);

    std::vector<float> flat;
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    DeviceBuffer<float> d_logits(flat);
    DeviceBuffer<int32_t> out(rows.size());
    ASSERT_EQ(cuda::ArgmaxRows(d_logits.get(), static_cast<int64_t>(rows.size()), vocab, out.get(), nullptr),
              cudaSuccess);
    const std::vector<int32_t> got = out.Download();
    Sampler sampler;
    SamplerConfig greedy;
    greedy.temperature = 0.f;
    for (size_t r = 0; r < rows.size(); ++r) {
      EXPECT_EQ(got[r], sampler.Sample(rows[r], greedy, {}).token) << "vocab " << vocab << " row " << r;
    }
    // A row alone gives the same answer.
    DeviceBuffer<int32_t> one(1);
    ASSERT_EQ(cuda::ArgmaxRows(d_logits.get() + vocab, 1, vocab, one.get(), nullptr), cudaSuccess);
    EXPECT_EQ(one.Download()[0], got[1]);
  }
  EXPECT_EQ(cuda::ArgmaxRows(nullptr, 0, 100, nullptr, nullptr), cudaSuccess);
}

TEST(CudaSamplingTest, SampleRowsMatchesHostSampler) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  for (int64_t vocab : Vocabs()) {
    const std::vector<Case> cases = SamplingCases(vocab, static_cast<uint32_t>(vocab));
    const std::vector<int32_t> got = DeviceSample(cases, vocab);
    ASSERT_EQ(got.size(), cases.size());
    Sampler sampler;
    int skipped = 0;
    for (size_t r = 0; r < cases.size(); ++r) {
      const Case& c = cases[r];
      const SampleContext ctx = ContextOf(c);
      const int32_t want = sampler.Sample(c.logits, c.config, ctx).token;
      const double u = CounterUniform(c.config.seed, static_cast<uint64_t>(c.choice), static_cast<uint64_t>(c.position));
      if (got[r] != want && NearBoundary(sampler.Distribution(c.logits, c.config, ctx), c.config, u)) {
        ++skipped;
        continue;
      }
      EXPECT_EQ(got[r], want) << c.name << " (vocab " << vocab << ", row " << r << ", u " << u << ")";
    }
    EXPECT_LE(skipped, static_cast<int>(cases.size()) / 20) << "too many draws on a CDF boundary";
    std::printf("vocab %lld: %zu draws, %d skipped near a CDF boundary\n", static_cast<long long>(vocab),
                cases.size(), skipped);
  }
}

// A greedy row samples the host's greedy token exactly, penalties and bans included.
TEST(CudaSamplingTest, GreedyWithPenaltiesIsExact) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  const int64_t vocab = 5003;
  std::mt19937 rng(5);
  std::vector<Case> cases;
  for (int i = 0; i < 12; ++i) {
    Case k;
    k.name = "greedy " + std::to_string(i);
    k.logits = RandomRow(vocab, rng, 1.f);
    if (i % 3 == 0) {
      for (auto& x : k.logits) x = std::round(x * 4.f);  // ties
    }
    k.config.temperature = 0.f;
    k.config.repetition_penalty = i % 2 ? 1.5f : 1.f;
    k.config.frequency_penalty = 0.25f * static_cast<float>(i % 3);
    k.config.presence_penalty = i % 4 ? 0.5f : 0.f;
    const int32_t top = static_cast<int32_t>(std::max_element(k.logits.begin(), k.logits.end()) - k.logits.begin());
    k.prompt = RandomTokens(50, vocab, rng);
    k.output = RandomTokens(30, vocab, rng);
    k.output.push_back(top);
    k.prompt.push_back(top);
    if (i % 5 == 1) k.banned = {top};
    if (i % 4 == 2) k.config.logit_bias = {{top, -0.5f}, {7, 0.25f}, {7, 0.25f}};
    cases.push_back(std::move(k));
  }
  const std::vector<int32_t> got = DeviceSample(cases, vocab);
  Sampler sampler;
  for (size_t r = 0; r < cases.size(); ++r) {
    EXPECT_EQ(got[r], sampler.Sample(cases[r].logits, cases[r].config, ContextOf(cases[r])).token) << cases[r].name;
  }
}

// A row's token does not depend on the batch it is sampled in.
TEST(CudaSamplingTest, SampleRowsIsBatchInvariant) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  const int64_t vocab = kEmu ? 1543 : 32000;
  const std::vector<Case> cases = SamplingCases(vocab, 77);
  const std::vector<int32_t> batch = DeviceSample(cases, vocab);
  std::vector<Case> reversed(cases.rbegin(), cases.rend());
  const std::vector<int32_t> rev = DeviceSample(reversed, vocab);
  for (size_t r = 0; r < cases.size(); ++r) {
    EXPECT_EQ(rev[cases.size() - 1 - r], batch[r]) << cases[r].name;
    // Alone: one draw per config (a launch each).
    if (r % 8 == 0) {
      EXPECT_EQ(DeviceSample({cases[r]}, vocab)[0], batch[r]) << cases[r].name;
    }
  }
}

TEST(CudaSamplingTest, LogSumExpRowsMatchesHost) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(9);
  for (int64_t vocab : {int64_t{1}, int64_t{333}, Vocabs().back()}) {
    std::vector<std::vector<float>> rows;
    for (float scale : {0.5f, 4.f, 30.f}) rows.push_back(RandomRow(vocab, rng, scale));
    std::vector<float> masked = RandomRow(vocab, rng, 1.f);
    for (size_t i = 1; i < masked.size(); i += 2) masked[i] = -kInf;
    rows.push_back(masked);
    rows.push_back(std::vector<float>(static_cast<size_t>(vocab), -kInf));
    std::vector<float> pinf = RandomRow(vocab, rng, 1.f);
    pinf[0] = kInf;
    rows.push_back(pinf);
    std::vector<float> flat;
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    DeviceBuffer<float> d_logits(flat);
    DeviceBuffer<double> out(rows.size());
    ASSERT_EQ(cuda::LogSumExpRows(d_logits.get(), static_cast<int64_t>(rows.size()), vocab, out.get(), nullptr),
              cudaSuccess);
    const std::vector<double> got = out.Download();
    for (size_t r = 0; r < rows.size(); ++r) {
      const double want = LogSumExp(rows[r]);
      if (std::isinf(want)) {
        EXPECT_EQ(got[r], want) << "vocab " << vocab << " row " << r;
      } else {
        EXPECT_NEAR(got[r], want, 1e-12 * (1.0 + std::fabs(want))) << "vocab " << vocab << " row " << r;
      }
    }
    DeviceBuffer<double> one(1);
    ASSERT_EQ(cuda::LogSumExpRows(d_logits.get() + 2 * vocab, 1, vocab, one.get(), nullptr), cudaSuccess);
    const double alone = one.Download()[0];
    EXPECT_EQ(0, std::memcmp(&alone, &got[2], sizeof(double)));
  }
}

TEST(CudaSamplingTest, RejectsBadArguments) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  EXPECT_EQ(cuda::SampleRows(nullptr, 0, 10, nullptr, {}, {}, {}, nullptr, 0, nullptr, nullptr), cudaSuccess);
  DeviceBuffer<float> logits(20);
  DeviceBuffer<SampleRowParams> params(std::vector<SampleRowParams>(2));
  DeviceBuffer<int32_t> out(2);
  const size_t need = cuda::SampleRowsWorkspaceBytes(2, 10);
  DeviceBuffer<unsigned char> ws(need);
  EXPECT_EQ(cuda::SampleRows(logits.get(), 2, 10, params.get(), {}, {}, {}, ws.get(), need - 1, out.get(), nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::SampleRows(logits.get(), 2, 0, params.get(), {}, {}, {}, ws.get(), need, out.get(), nullptr),
            cudaErrorInvalidValue);
  // All-zero logits, default params: a valid token; no lists at all.
  ASSERT_EQ(cuda::SampleRows(logits.get(), 2, 10, params.get(), {}, {}, {}, ws.get(), need, out.get(), nullptr),
            cudaSuccess);
  for (int32_t t : out.Download()) EXPECT_TRUE(t >= 0 && t < 10) << t;
}

}  // namespace
}  // namespace tessera::kernels
