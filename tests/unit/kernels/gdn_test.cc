// Gated DeltaNet kernels: the GC-form core against the token recurrence in double, and its
// bitwise invariances (call splits, 1-row decode, threads, batching); the conv1d ring;
// the gated RMSNorm.
#include "kernels/cpu/gdn.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace tessera::kernels::cpu {
namespace {

std::vector<float> Uniform(int64_t n, std::mt19937* rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(*rng);
  return v;
}

bool Same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

GdnDims SmallDims(bool tiled = false) {
  GdnDims d;
  d.k_heads = 2;
  d.v_heads = 4;
  d.k_dim = 20;  // not a multiple of 8: Dot's tail
  d.v_dim = 44;  // not a multiple of 8: a short last column tile and scalar tails on AVX2
  d.conv_kernel = 4;
  d.v_heads_tiled = tiled;
  return d;
}

// One sequence's layer inputs (conv outputs, projections) and per-head parameters.
struct Inputs {
  int64_t tokens = 0;
  std::vector<float> qkv, a, b, a_log, dt_bias;
};

enum class Regime { kMild, kStrongDecay, kBetaOne };

Inputs MakeInputs(const GdnDims& d, int64_t tokens, uint32_t seed, Regime regime = Regime::kMild) {
  std::mt19937 rng(seed);
  Inputs in;
  in.tokens = tokens;
  in.qkv = Uniform(tokens * d.conv_channels(), &rng, -1.0f, 1.0f);
  in.a = Uniform(tokens * d.v_heads, &rng, -2.0f, 2.0f);
  in.b = Uniform(tokens * d.v_heads, &rng, -3.0f, 3.0f);
  in.a_log = Uniform(d.v_heads, &rng, -2.0f, 0.5f);
  in.dt_bias = Uniform(d.v_heads, &rng, -1.0f, 1.0f);
  if (regime == Regime::kStrongDecay) {
    std::fill(in.a_log.begin(), in.a_log.end(), 3.0f);  // e^g down to ~1e-9 per token
    for (float& x : in.a) x += 4.0f;
  } else if (regime == Regime::kBetaOne) {
    for (float& x : in.b) x = 12.0f + x;  // σ(b) within 1e-5 of 1
    for (float& x : in.a) x -= 6.0f;      // slow decay: the state keeps its history
  }
  return in;
}

// The token recurrence in double, written from the equations (not from the kernel):
// S ← e^g S; u = β (v - Sᵀ k̂); S ← S + k̂ uᵀ; o = Sᵀ q̂.
void Recurrence(const GdnDims& d, const Inputs& in, std::vector<double>* out, std::vector<double>* state) {
  const int64_t dk = d.k_dim, dv = d.v_dim, C = d.conv_channels();
  state->assign(d.v_heads * dk * dv, 0.0);
  out->assign(in.tokens * d.v_heads * dv, 0.0);
  for (int64_t t = 0; t < in.tokens; ++t) {
    const float* x = in.qkv.data() + t * C;
    for (int64_t h = 0; h < d.v_heads; ++h) {
      const int64_t kh = d.v_heads_tiled ? h % d.k_heads : h / (d.v_heads / d.k_heads);
      std::vector<double> q(dk), k(dk);
      double qq = 0, kk = 0;
      for (int64_t i = 0; i < dk; ++i) {
        q[i] = x[kh * dk + i];
        k[i] = x[d.k_heads * dk + kh * dk + i];
        qq += q[i] * q[i];
        kk += k[i] * k[i];
      }
      for (int64_t i = 0; i < dk; ++i) {
        q[i] /= std::sqrt(qq + 1e-6) * std::sqrt(static_cast<double>(dk));
        k[i] /= std::sqrt(kk + 1e-6);
      }
      const double z = static_cast<double>(in.a[t * d.v_heads + h]) + in.dt_bias[h];
      const double g = -std::exp(static_cast<double>(in.a_log[h])) * (z > 20 ? z : std::log1p(std::exp(z)));
      const double beta = 1.0 / (1.0 + std::exp(-static_cast<double>(in.b[t * d.v_heads + h])));
      double* S = state->data() + h * dk * dv;
      for (int64_t i = 0; i < dk * dv; ++i) S[i] *= std::exp(g);
      const float* v = x + 2 * d.k_heads * dk + h * dv;
      for (int64_t c = 0; c < dv; ++c) {
        double sk = 0;
        for (int64_t i = 0; i < dk; ++i) sk += S[i * dv + c] * k[i];
        const double u = beta * (v[c] - sk);
        for (int64_t i = 0; i < dk; ++i) S[i * dv + c] += k[i] * u;
        double o = 0;
        for (int64_t i = 0; i < dk; ++i) o += S[i * dv + c] * q[i];
        (*out)[(t * d.v_heads + h) * dv + c] = o;
      }
    }
  }
}

// A sequence's kernel-side buffers.
struct SeqState {
  std::vector<float> state, open, out;
  SeqState(const GdnDims& d, int64_t tokens)
      : state(d.state_floats(), 0.0f), open(d.open_floats(), 0.0f), out(tokens * d.v_heads * d.v_dim, 0.0f) {}
};

GdnSeq Slice(const GdnDims& d, const Inputs& in, SeqState* st, int64_t start, int64_t rows) {
  GdnSeq s;
  s.start = start;
  s.rows = rows;
  s.qkv = in.qkv.data() + start * d.conv_channels();
  s.a = in.a.data() + start * d.v_heads;
  s.b = in.b.data() + start * d.v_heads;
  s.state = st->state.data();
  s.open = st->open.data();
  s.out = st->out.data() + start * d.v_heads * d.v_dim;
  return s;
}

// Runs one sequence through calls ending at each of `cuts` (the last one = tokens).
SeqState RunCalls(const GdnDims& d, const Inputs& in, const std::vector<int64_t>& cuts, ThreadPool* pool) {
  SeqState st(d, in.tokens);
  GdnScratch scratch;
  const GdnParams p{in.a_log.data(), in.dt_bias.data()};
  int64_t start = 0;
  for (int64_t end : cuts) {
    const GdnSeq s = Slice(d, in, &st, start, end - start);
    GdnCore(d, p, &s, 1, &scratch, pool);
    start = end;
  }
  return st;
}

// Normwise: the worst |got - want| relative to the largest |want| of the whole tensor (a
// per-vector scale would measure the conditioning of small q̂·k̂ dot products, not the kernel).
void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double rel, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  double scale = 1e-30;
  for (double w : want) scale = std::max(scale, std::abs(w));
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= rel * scale)) {  // NaN fails too
      if (bad++ == 0) first = static_cast<int64_t>(i);
    }
  }
  EXPECT_EQ(bad, 0) << what << ": first at " << first << ": " << (first < 0 ? 0.0f : got[first]) << " vs "
                    << (first < 0 ? 0.0 : want[first]) << " (scale " << scale << ")";
}

// Each test on the scalar and the AVX2 column loops (each path is self-consistent).
class GdnPath : public PathTest {};

TEST_P(GdnPath, GcMatchesTheTokenRecurrence) {
  for (Regime regime : {Regime::kMild, Regime::kStrongDecay, Regime::kBetaOne}) {
    for (bool tiled : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "regime " << static_cast<int>(regime) << (tiled ? ", tiled" : ""));
      const GdnDims d = SmallDims(tiled);
      const Inputs in = MakeInputs(d, 48, 7 + static_cast<uint32_t>(regime), regime);
      const SeqState st = RunCalls(d, in, {48}, nullptr);
      std::vector<double> out, state;
      Recurrence(d, in, &out, &state);
      ExpectNear(st.out, out, 1e-5, "output");
      ExpectNear(st.state, state, 1e-5, "state after 3 chunks");
    }
  }
}

TEST_P(GdnPath, EverySplitIntoTwoCallsIsBitwiseOneCall) {
  const GdnDims d = SmallDims();
  const Inputs in = MakeInputs(d, 50, 11);
  const SeqState one = RunCalls(d, in, {50}, nullptr);
  for (int64_t cut = 1; cut < 50; ++cut) {
    const SeqState two = RunCalls(d, in, {cut, 50}, nullptr);
    EXPECT_TRUE(Same(two.out, one.out)) << "split at " << cut;
    EXPECT_TRUE(Same(two.state, one.state)) << "split at " << cut;
    EXPECT_TRUE(Same(two.open, one.open)) << "split at " << cut;
  }
}

TEST_P(GdnPath, OneRowDecodeStepsAreBitwisePrefill) {
  const GdnDims d = SmallDims(true);
  const Inputs in = MakeInputs(d, 50, 13, Regime::kStrongDecay);
  const SeqState prefill = RunCalls(d, in, {50}, nullptr);
  std::vector<int64_t> steps;
  for (int64_t t = 1; t <= 50; ++t) steps.push_back(t);
  const SeqState decode = RunCalls(d, in, steps, nullptr);
  EXPECT_TRUE(Same(decode.out, prefill.out));
  EXPECT_TRUE(Same(decode.state, prefill.state));
  // Prefill of 21 rows then decode (a chat turn) too.
  steps.assign({21});
  for (int64_t t = 22; t <= 50; ++t) steps.push_back(t);
  EXPECT_TRUE(Same(RunCalls(d, in, steps, nullptr).out, prefill.out));
}

TEST_P(GdnPath, ThreadCountNeverChangesBits) {
  const GdnDims d = SmallDims();
  const Inputs in = MakeInputs(d, 50, 17);
  ThreadPool pool3(3);
  const SeqState one = RunCalls(d, in, {50}, nullptr);
  const SeqState three = RunCalls(d, in, {19, 50}, &pool3);
  EXPECT_TRUE(Same(three.out, one.out));
  EXPECT_TRUE(Same(three.state, one.state));
}

TEST_P(GdnPath, TwoSequencesBatchedAreBitwiseAlone) {
  const GdnDims d = SmallDims();
  const Inputs x = MakeInputs(d, 50, 19);
  Inputs y = MakeInputs(d, 50, 23, Regime::kBetaOne);
  y.a_log = x.a_log;  // one layer: the per-head parameters are shared by the batch
  y.dt_bias = x.dt_bias;
  const SeqState x_alone = RunCalls(d, x, {50}, nullptr), y_alone = RunCalls(d, y, {50}, nullptr);
  // y prefilled to 7 alone, then its rows 7..49 in one call beside all of x: the two
  // sequences' chunk boundaries fall on different rows of the call.
  SeqState xs(d, 50), ys(d, 50);
  GdnScratch scratch;
  ThreadPool pool(2);
  const GdnParams p{x.a_log.data(), x.dt_bias.data()};
  const GdnSeq y0 = Slice(d, y, &ys, 0, 7);
  GdnCore(d, p, &y0, 1, &scratch, nullptr);
  const GdnSeq batch[2] = {Slice(d, x, &xs, 0, 50), Slice(d, y, &ys, 7, 43)};
  GdnCore(d, p, batch, 2, &scratch, &pool);
  EXPECT_TRUE(Same(xs.out, x_alone.out));
  EXPECT_TRUE(Same(xs.state, x_alone.state));
  EXPECT_TRUE(Same(ys.out, y_alone.out));
  EXPECT_TRUE(Same(ys.state, y_alone.state));
}

// Speculation inside a chunk: a verify call over positions 21..24 whose rows 22..24 are
// then rejected (other inputs), resumed at 22 with the accepted inputs, gives the bits of
// the straight run: rows at or past a call's start are never read from earlier calls.
TEST_P(GdnPath, SteppingBackInsideAChunkIsBitwiseStraight) {
  const GdnDims d = SmallDims();
  const Inputs in = MakeInputs(d, 50, 37);
  Inputs drafted = in;  // rows 22..24 differ from what is finally accepted
  for (int64_t i = 22 * d.conv_channels(); i < 25 * d.conv_channels(); ++i) drafted.qkv[i] = -drafted.qkv[i];
  for (int64_t i = 22 * d.v_heads; i < 25 * d.v_heads; ++i) drafted.a[i] += 1.0f;
  const SeqState straight = RunCalls(d, in, {50}, nullptr);
  SeqState st(d, 50);
  GdnScratch scratch;
  const GdnParams p{in.a_log.data(), in.dt_bias.data()};
  const GdnSeq calls[3] = {Slice(d, in, &st, 0, 21), Slice(d, drafted, &st, 21, 4), Slice(d, in, &st, 22, 28)};
  for (const GdnSeq& c : calls) GdnCore(d, p, &c, 1, &scratch, nullptr);
  EXPECT_TRUE(Same(st.out, straight.out));
  EXPECT_TRUE(Same(st.state, straight.state));
}

INSTANTIATE_TEST_SUITE_P(Paths, GdnPath, ::testing::Values(Path::kScalar, Path::kAvx2), PathName);

// The conv1d: against a double loop over a zero-padded input, and split into calls
// (with a ring of K - 1 rows and one longer ring) bitwise equal to one call.
TEST(Gdn, ConvMatchesReferenceAndIsSplitInvariant) {
  const GdnDims d = SmallDims();
  const int64_t C = d.conv_channels(), K = d.conv_kernel, T = 23;
  std::mt19937 rng(29);
  const std::vector<float> x = Uniform(T * C, &rng, -2.0f, 2.0f), w = Uniform(C * K, &rng, -1.0f, 1.0f);
  auto run = [&](const std::vector<int64_t>& cuts, int64_t ring_rows, ThreadPool* pool) {
    std::vector<float> ring(ring_rows * C, 1e9f), out(T * C, 0.0f);  // garbage: p < 0 must read 0
    int64_t start = 0;
    for (int64_t end : cuts) {
      GdnConvSeq s{start, end - start, x.data() + start * C, ring.data(), ring_rows, out.data() + start * C};
      GdnConv(d, w.data(), &s, 1, pool);
      start = end;
    }
    return out;
  };
  const std::vector<float> one = run({T}, K - 1, nullptr);
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < K; ++j) {
        const int64_t p = t - K + 1 + j;
        if (p >= 0) acc += static_cast<double>(w[c * K + j]) * x[p * C + c];
      }
      const double want = acc / (1.0 + std::exp(-acc));
      const double err = std::abs(one[t * C + c] - want) / std::max(1.0, std::abs(want));
      worst = std::isnan(err) ? INFINITY : std::max(worst, err);
    }
  }
  EXPECT_LE(worst, 1e-6);
  ThreadPool pool(3);
  EXPECT_TRUE(Same(run({1, 2, 3, 10, 11, T}, K - 1, nullptr), one));
  EXPECT_TRUE(Same(run({5, 6, T}, K + 5, &pool), one));
  // Speculation: rows 9..12 computed from drafted inputs at 10..12, then resumed at 10.
  std::vector<float> ring((K + 2) * C, 0.0f), out(T * C, 0.0f), drafted = x;
  for (int64_t i = 10 * C; i < 13 * C; ++i) drafted[i] += 1.0f;
  const GdnConvSeq calls[3] = {{0, 9, x.data(), ring.data(), K + 2, out.data()},
                               {9, 4, drafted.data() + 9 * C, ring.data(), K + 2, out.data() + 9 * C},
                               {10, T - 10, x.data() + 10 * C, ring.data(), K + 2, out.data() + 10 * C}};
  for (const GdnConvSeq& c : calls) GdnConv(d, w.data(), &c, 1, nullptr);
  EXPECT_TRUE(Same(out, one));
}

TEST(Gdn, GatedRmsNormMatchesReference) {
  std::mt19937 rng(31);
  const int64_t rows = 3, heads = 2, dim = 40;
  const std::vector<float> o = Uniform(rows * heads * dim, &rng, -3.0f, 3.0f);
  const std::vector<float> z = Uniform(rows * heads * dim, &rng, -4.0f, 4.0f);
  const std::vector<float> w = Uniform(dim, &rng, 0.5f, 1.5f);
  std::vector<float> y(o.size()), y3(o.size());
  GatedRmsNorm(o.data(), z.data(), w.data(), rows, heads, dim, 1e-6f, y.data(), nullptr);
  ThreadPool pool(3);
  GatedRmsNorm(o.data(), z.data(), w.data(), rows, heads, dim, 1e-6f, y3.data(), &pool);
  EXPECT_TRUE(Same(y, y3));
  for (int64_t v = 0; v < rows * heads; ++v) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(o[v * dim + i]) * o[v * dim + i];
    const double scale = 1.0 / std::sqrt(ss / dim + 1e-6);
    for (int64_t i = 0; i < dim; ++i) {
      const double zz = z[v * dim + i];
      const double want = o[v * dim + i] * scale * w[i] * zz / (1.0 + std::exp(-zz));
      EXPECT_NEAR(y[v * dim + i], want, 1e-5 * std::max(1.0, std::abs(want)));
    }
  }
}

TEST(Gdn, BadDimensionsAreRefusedNamingTheField) {
  GdnDims d = SmallDims();
  EXPECT_TRUE(CheckGdnDims(d).ok());
  d.v_heads = 3;
  EXPECT_NE(CheckGdnDims(d).message().find("linear_num_value_heads"), std::string::npos);
  d = SmallDims();
  d.conv_kernel = 0;
  EXPECT_NE(CheckGdnDims(d).message().find("linear_conv_kernel_dim"), std::string::npos);
}

}  // namespace
}  // namespace tessera::kernels::cpu
