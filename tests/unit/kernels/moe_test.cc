// MoE kernels: routing (softmax, top-k order, ties, renormalisation) and the
// grouped expert FFN, bitwise against each token computed alone with the
// public Linear/SiluMul ops, for float and quantized experts, 1 and 2 threads.
#include "kernels/cpu/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/quant.h"
#include "kernels/cpu/ops.h"

namespace tessera::kernels::cpu {
namespace {

std::vector<float> RandomVec(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// One [rows, cols] matrix stored in `type`.
std::vector<uint8_t> Matrix(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> v = RandomVec(rows * cols, seed);
  std::vector<uint8_t> out(rows * DTypeRowBytes(type, cols));
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* dst = out.data() + r * DTypeRowBytes(type, cols);
    const float* src = v.data() + r * cols;
    if (IsQuantized(type)) {
      QuantizeRow(src, cols, type, dst);
    } else {
      for (int64_t c = 0; c < cols; ++c) {
        if (type == DType::kF32) {
          std::memcpy(dst + 4 * c, &src[c], 4);
        } else {
          const uint16_t h = type == DType::kF16 ? F32ToF16(src[c]) : F32ToBf16(src[c]);
          std::memcpy(dst + 2 * c, &h, 2);
        }
      }
    }
  }
  return out;
}

TEST(MoeRouteTest, SoftmaxTopKOrderTiesAndRenormalize) {
  // Token 0: experts 1 and 2 tie for first; token 1: all equal.
  const std::vector<float> logits = {0.0f, 2.0f, 2.0f, 1.0f, 3.0f, 3.0f, 3.0f, 3.0f};
  std::vector<int32_t> ids(4);
  std::vector<float> w(4);
  MoeRoute(logits.data(), 2, 4, 2, /*renormalize=*/false, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 0, 1}));
  const double z = 1 + 2 * std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(w[0], std::exp(2.0) / z, 1e-6);
  EXPECT_EQ(w[0], w[1]);
  EXPECT_NEAR(w[2], 0.25, 1e-6);
  MoeRoute(logits.data(), 2, 4, 2, /*renormalize=*/true, ids.data(), w.data());
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[3], 0.5f);
  // k = E: every expert once, in descending order.
  std::vector<int32_t> all(4);
  std::vector<float> aw(4);
  MoeRoute(logits.data(), 1, 4, 4, false, all.data(), aw.data());
  EXPECT_EQ(all, (std::vector<int32_t>{1, 2, 3, 0}));
}

float Logit(double p) { return static_cast<float>(std::log(p / (1 - p))); }
double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// DeepSeekMoE's group scores: max (group_limited_greedy) and top-2 sum (noaux_tc)
// choose different groups for the same scores; equal groups go to the lower one.
TEST(MoeRouteTest, GroupScoreMaxVersusTopTwoSum) {
  const std::vector<float> logits = {Logit(0.9), Logit(0.1), Logit(0.6), Logit(0.6), 0, 0, 0, 0};
  MoeRouteArgs a;
  a.num_experts = 4;
  a.top_k = 1;
  a.sigmoid = true;
  a.n_group = 2;
  a.topk_group = 1;
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  a.groups = MoeGroupScore::kMax;
  MoeRoute(logits.data(), 2, a, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 0}));  // group 0 by max 0.9; tied groups: the lower
  a.groups = MoeGroupScore::kTop2Sum;
  MoeRoute(logits.data(), 2, a, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 0}));  // group 1 by 1.2 > 1.0; tied experts 2, 3: the lower
  EXPECT_NEAR(w[0], 0.6, 1e-6);
}

// The selection bias chooses the experts; the weights are the unbiased sigmoids,
// renormalised over the chosen ones.
TEST(MoeRouteTest, SelectionBiasChoosesButNeverWeighs) {
  const std::vector<float> logits = {1.0f, 0.0f, 0.5f, -1.0f}, bias = {0, 0, 0, 2};
  MoeRouteArgs a;
  a.num_experts = 4;
  a.top_k = 2;
  a.sigmoid = true;
  a.selection_bias = bias.data();
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  MoeRoute(logits.data(), 1, a, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 0}));
  EXPECT_NEAR(w[0], Sigmoid(-1), 1e-6);
  EXPECT_NEAR(w[1], Sigmoid(1), 1e-6);
  a.renormalize = true;
  MoeRoute(logits.data(), 1, a, ids.data(), w.data());
  EXPECT_NEAR(w[0], Sigmoid(-1) / (Sigmoid(-1) + Sigmoid(1)), 1e-6);
  EXPECT_NEAR(w[0] + w[1], 1.0, 1e-6);
}

// Experts outside the chosen groups are masked with -inf (vLLM, llama.cpp), not 0 (HF):
// the chosen group's experts win even when their biased scores are negative.
TEST(MoeRouteTest, GroupMaskBeatsNegativeBiasedScores) {
  const std::vector<float> logits = {0, 0, 0, 0}, bias = {-2, -2, -5, -5};
  MoeRouteArgs a;
  a.num_experts = 4;
  a.top_k = 2;
  a.sigmoid = true;
  a.groups = MoeGroupScore::kTop2Sum;
  a.n_group = 2;
  a.topk_group = 1;
  a.selection_bias = bias.data();
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  MoeRoute(logits.data(), 1, a, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(w, (std::vector<float>{0.5f, 0.5f}));
}

TEST(MoeRouteTest, CountsAndSigmoidGate) {
  const std::vector<int32_t> ids = {0, 3, 3, 1, 3, 0};
  std::vector<int64_t> counts = {10, 0, 0, 0};
  MoeCountExperts(ids.data(), 6, 4, counts.data());
  EXPECT_EQ(counts, (std::vector<int64_t>{12, 1, 0, 3}));
  std::vector<float> out = {1, 1, 2, 2}, shared = {1, 2, 3, 4}, gate = {0.0f, 100.0f};
  SigmoidGateAdd(out.data(), shared.data(), gate.data(), 2, 2, nullptr);
  EXPECT_FLOAT_EQ(out[0], 1.5f);
  EXPECT_FLOAT_EQ(out[1], 2.0f);
  EXPECT_FLOAT_EQ(out[2], 5.0f);
  EXPECT_FLOAT_EQ(out[3], 6.0f);
}

struct Experts {
  int64_t num, hidden, inter;
  DType type;
  std::vector<std::vector<uint8_t>> gate, up, down;
  std::vector<const void*> g, u, d;
};

Experts MakeExperts(DType type, int64_t num, int64_t hidden, int64_t inter) {
  Experts e{num, hidden, inter, type, {}, {}, {}, {}, {}, {}};
  for (int64_t i = 0; i < num; ++i) {
    e.gate.push_back(Matrix(type, inter, hidden, 100 + 3 * i));
    e.up.push_back(Matrix(type, inter, hidden, 101 + 3 * i));
    e.down.push_back(Matrix(type, hidden, inter, 102 + 3 * i));
  }
  for (int64_t i = 0; i < num; ++i) {
    e.g.push_back(e.gate[i].data());
    e.u.push_back(e.up[i].data());
    e.d.push_back(e.down[i].data());
  }
  return e;
}

std::vector<float> RunExperts(const Experts& e, const std::vector<float>& x, const std::vector<int32_t>& ids,
                              const std::vector<float>& w, int64_t k, ThreadPool* pool) {
  const int64_t tokens = static_cast<int64_t>(x.size()) / e.hidden;
  std::vector<float> out(x.size(), -7.0f);
  MoeExpertsArgs a;
  a.x = x.data();
  a.tokens = tokens;
  a.hidden = e.hidden;
  a.inter = e.inter;
  a.top_k = k;
  a.num_experts = e.num;
  a.topk_ids = ids.data();
  a.topk_weights = w.data();
  a.gate_dtype = a.up_dtype = a.down_dtype = e.type;
  a.gate = e.g.data();
  a.up = e.u.data();
  a.down = e.d.data();
  a.out = out.data();
  MoeScratch scratch;
  MoeExperts(a, &scratch, pool);
  return out;
}

// One token, the definition: sum_j w_j * down(silu(gate x) * up x) with the public ops.
std::vector<float> OneToken(const Experts& e, const float* x, const int32_t* ids, const float* w, int64_t k) {
  std::vector<float> out(e.hidden, 0.0f), gu(2 * e.inter), act(e.inter), y(e.hidden);
  for (int64_t j = 0; j < k; ++j) {
    Linear(x, 1, e.hidden, e.g[ids[j]], e.type, e.inter, nullptr, gu.data(), 2 * e.inter, nullptr);
    Linear(x, 1, e.hidden, e.u[ids[j]], e.type, e.inter, nullptr, gu.data() + e.inter, 2 * e.inter, nullptr);
    SiluMul(gu.data(), 1, e.inter, act.data(), nullptr);
    Linear(act.data(), 1, e.inter, e.d[ids[j]], e.type, e.hidden, nullptr, y.data(), e.hidden, nullptr);
    for (int64_t i = 0; i < e.hidden; ++i) out[i] = j == 0 ? w[j] * y[i] : out[i] + w[j] * y[i];
  }
  return out;
}

class MoeExpertsTest : public ::testing::TestWithParam<DType> {};

TEST_P(MoeExpertsTest, BitwiseEqualToEachTokenAloneAnyBatchAnyThreads) {
  // Wide enough (inter 512 = 5 full tiles + a partial one; whole Q4_K blocks)
  // that the two-thread path really splits the work.
  const int64_t num = 6, hidden = 256, inter = 512, k = 2, tokens = 13;
  const Experts e = MakeExperts(GetParam(), num, hidden, inter);
  const std::vector<float> x = RandomVec(tokens * hidden, 7);
  std::vector<float> logits = RandomVec(tokens * num, 8);
  std::vector<int32_t> ids(tokens * k);
  std::vector<float> w(tokens * k);
  MoeRoute(logits.data(), tokens, num, k, true, ids.data(), w.data());
  ThreadPool pool2(2);
  const std::vector<float> batched1 = RunExperts(e, x, ids, w, k, nullptr);
  const std::vector<float> batched2 = RunExperts(e, x, ids, w, k, &pool2);
  EXPECT_EQ(0, std::memcmp(batched1.data(), batched2.data(), batched1.size() * 4)) << "1 vs 2 threads";
  for (int64_t t = 0; t < tokens; ++t) {
    const std::vector<float> want = OneToken(e, x.data() + t * hidden, ids.data() + t * k, w.data() + t * k, k);
    EXPECT_EQ(0, std::memcmp(want.data(), batched2.data() + t * hidden, hidden * 4)) << "token " << t;
    // The token alone through MoeExperts.
    const std::vector<float> xt(x.begin() + t * hidden, x.begin() + (t + 1) * hidden);
    const std::vector<int32_t> it(ids.begin() + t * k, ids.begin() + (t + 1) * k);
    const std::vector<float> wt(w.begin() + t * k, w.begin() + (t + 1) * k);
    const std::vector<float> alone = RunExperts(e, xt, it, wt, k, &pool2);
    EXPECT_EQ(0, std::memcmp(alone.data(), want.data(), hidden * 4)) << "alone, token " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MoeExpertsTest,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_0,
                                           DType::kQ4_K),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

TEST(MoeExpertsTest, MatchesDoublePrecisionDefinition) {
  const int64_t num = 4, hidden = 32, inter = 16, k = 3, tokens = 5;
  const Experts e = MakeExperts(DType::kF32, num, hidden, inter);
  const std::vector<float> x = RandomVec(tokens * hidden, 9);
  std::vector<float> logits = RandomVec(tokens * num, 10);
  std::vector<int32_t> ids(tokens * k);
  std::vector<float> w(tokens * k);
  MoeRoute(logits.data(), tokens, num, k, false, ids.data(), w.data());
  const std::vector<float> out = RunExperts(e, x, ids, w, k, nullptr);
  auto val = [](const std::vector<uint8_t>& m, int64_t i) {
    float f;
    std::memcpy(&f, m.data() + 4 * i, 4);
    return static_cast<double>(f);
  };
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> want(hidden, 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t ex = ids[t * k + j];
      std::vector<double> act(inter);
      for (int64_t r = 0; r < inter; ++r) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < hidden; ++c) {
          g += val(e.gate[ex], r * hidden + c) * x[t * hidden + c];
          u += val(e.up[ex], r * hidden + c) * x[t * hidden + c];
        }
        act[r] = g / (1 + std::exp(-g)) * u;
      }
      for (int64_t r = 0; r < hidden; ++r) {
        double y = 0;
        for (int64_t c = 0; c < inter; ++c) y += val(e.down[ex], r * inter + c) * act[c];
        want[r] += w[t * k + j] * y;
      }
    }
    for (int64_t r = 0; r < hidden; ++r) EXPECT_NEAR(out[t * hidden + r], want[r], 1e-4) << t << "," << r;
  }
}

// gpt-oss routing: the top-k logits (ties to the lower id), softmax over those k.
TEST(MoeRouteTest, SoftmaxOverTheTopKLogits) {
  const std::vector<float> logits = {0.0f, 2.0f, 2.0f, 1.0f, -1.0f, 5.0f, 4.0f, -3.0f};
  std::vector<int32_t> ids(4);
  std::vector<float> w(4);
  MoeRouteSoftmaxTopK(logits.data(), 2, 4, 2, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 1, 2}));
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 0.5f);
  EXPECT_NEAR(w[2], 1.0 / (1.0 + std::exp(-1.0)), 1e-7);  // not the softmax over all four
  EXPECT_NEAR(w[3], std::exp(-1.0) / (1.0 + std::exp(-1.0)), 1e-7);
}

// The clamped SwiGLU against its double formula, on both sides of each clamp.
TEST(MoeRouteTest, SwigluOaiMatchesFormulaAtTheClamps) {
  const float limit = 7.0f, alpha = 1.702f;
  const std::vector<float> g = {-9.0f, -7.0f, -0.5f, 0.0f, 3.0f, 6.999f, 7.0f, 12.0f};
  const std::vector<float> u = {-12.0f, -7.0f, -1.0f, 0.0f, 0.5f, 7.0f, 8.0f, 100.0f};
  const int64_t n = static_cast<int64_t>(g.size());
  std::vector<float> gu(g);
  gu.insert(gu.end(), u.begin(), u.end());
  std::vector<float> out(n);
  SwigluOaiMul(gu.data(), 1, n, alpha, limit, out.data(), nullptr);
  for (int64_t i = 0; i < n; ++i) {
    const double gc = std::min<double>(g[i], limit), uc = std::clamp<double>(u[i], -limit, limit);
    const double want = gc / (1.0 + std::exp(-alpha * gc)) * (uc + 1.0);
    EXPECT_NEAR(out[i], want, 1e-6 * std::max(1.0, std::fabs(want))) << i;
  }
}

// Experts with gate/up/down biases and the clamped SwiGLU: the double-precision
// definition (down bias inside y, before the routing weight), and each token alone
// == batched == 2 threads, bitwise.
TEST(MoeExpertsTest, BiasesAndClampedSwigluMatchDefinitionAndAreBatchInvariant) {
  const int64_t num = 5, hidden = 64, inter = 160, k = 2, tokens = 7;
  const Experts e = MakeExperts(DType::kF32, num, hidden, inter);
  std::vector<std::vector<float>> bg, bu, bd;
  std::vector<const float*> pg, pu, pd;
  for (int64_t i = 0; i < num; ++i) {
    bg.push_back(RandomVec(inter, 300 + i));
    bu.push_back(RandomVec(inter, 400 + i));
    bd.push_back(RandomVec(hidden, 500 + i));
  }
  for (int64_t i = 0; i < num; ++i) pg.push_back(bg[i].data()), pu.push_back(bu[i].data()), pd.push_back(bd[i].data());
  std::vector<float> x = RandomVec(tokens * hidden, 11);
  for (float& v : x) v *= 8.0f;  // pre-activations beyond the clamp limit
  std::vector<float> logits = RandomVec(tokens * num, 12);
  std::vector<int32_t> ids(tokens * k);
  std::vector<float> w(tokens * k);
  MoeRouteSoftmaxTopK(logits.data(), tokens, num, k, ids.data(), w.data());
  auto run = [&](int64_t t0, int64_t nt, ThreadPool* pool) {
    std::vector<float> out(nt * hidden, -7.0f);
    MoeExpertsArgs a;
    a.x = x.data() + t0 * hidden;
    a.tokens = nt;
    a.hidden = hidden;
    a.inter = inter;
    a.top_k = k;
    a.num_experts = num;
    a.topk_ids = ids.data() + t0 * k;
    a.topk_weights = w.data() + t0 * k;
    a.gate = e.g.data();
    a.up = e.u.data();
    a.down = e.d.data();
    a.gate_bias = pg.data();
    a.up_bias = pu.data();
    a.down_bias = pd.data();
    a.swiglu_oai = true;
    a.swiglu_alpha = 1.702f;
    a.swiglu_limit = 7.0f;
    a.out = out.data();
    MoeScratch scratch;
    MoeExperts(a, &scratch, pool);
    return out;
  };
  ThreadPool pool2(2);
  const std::vector<float> one = run(0, tokens, nullptr), two = run(0, tokens, &pool2);
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * 4));
  auto val = [](const std::vector<uint8_t>& m, int64_t i) {
    float f;
    std::memcpy(&f, m.data() + 4 * i, 4);
    return static_cast<double>(f);
  };
  for (int64_t t = 0; t < tokens; ++t) {
    const std::vector<float> alone = run(t, 1, &pool2);
    EXPECT_EQ(0, std::memcmp(alone.data(), one.data() + t * hidden, hidden * 4)) << "token " << t;
    std::vector<double> want(hidden, 0.0), mag(hidden, 0.0);
    for (int64_t j = 0; j < k; ++j) {
      const int32_t ex = ids[t * k + j];
      std::vector<double> act(inter);
      for (int64_t r = 0; r < inter; ++r) {
        double g = bg[ex][r], u = bu[ex][r];
        for (int64_t c = 0; c < hidden; ++c) {
          g += val(e.gate[ex], r * hidden + c) * x[t * hidden + c];
          u += val(e.up[ex], r * hidden + c) * x[t * hidden + c];
        }
        g = std::min(g, 7.0);
        u = std::clamp(u, -7.0, 7.0);
        act[r] = g / (1 + std::exp(-1.702 * g)) * (u + 1);
      }
      for (int64_t r = 0; r < hidden; ++r) {
        double y = bd[ex][r];
        for (int64_t c = 0; c < inter; ++c) y += val(e.down[ex], r * inter + c) * act[c];
        want[r] += w[t * k + j] * y;
        mag[r] += std::fabs(w[t * k + j] * y);
      }
    }
    for (int64_t r = 0; r < hidden; ++r) {
      EXPECT_NEAR(one[t * hidden + r], want[r], 1e-5 * mag[r] + 1e-4) << t << "," << r;
    }
  }
}

}  // namespace
}  // namespace tessera::kernels::cpu
