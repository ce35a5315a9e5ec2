// Quantized Linear for the 32-element types Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4
// (kernels/cpu/quant32_*.cc): random valid blocks built byte by byte (and blocks at the
// extremes of every field) against a double-precision reference on the dequantized weights
// (DequantizeRow) and independently quantized activations, within the bound
// quant32_scalar.cc documents; scalar == AVX2 == AVX-512 VNNI bitwise for every m in 1..70;
// a row alone == in a batch, 1 thread == 2; quantized MoE experts of these types.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/quant.h"
#include "common/thread_pool.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/ops.h"
#include "tests/unit/kernels/quant_test_util.h"

namespace tessera::kernels::cpu {
namespace {

using namespace qtest;  // NOLINT: the shared helpers (quant_test_util.h)

constexpr DType kTypes[] = {DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL, DType::kMXFP4};

bool HasMin(DType t) { return t == DType::kQ4_1 || t == DType::kQ5_1; }

std::string Name(DType t) { return std::string(DTypeName(t)); }

// kRandom: random bytes, scales of realistic size (f16 d up to 0.1 of either sign, mins up
// to ~18 d, MXFP4 exponents 2^-10 .. 2^6). kExtremes: besides, a quarter of the blocks with
// every field at an extreme (f16 +-65504, subnormal, +-0, 1; nibbles and fifth bits all set
// or clear, nibbles all 7; MXFP4 exponents 2^-28 and 2^16): finite, within the reference
// bound.
// kWild: any field value, f16 inf/NaN and E8M0 0/1/255 included (path equality only).
enum class Fill { kRandom, kExtremes, kWild };

struct Weights32 {
  DType type;
  int64_t n = 0, k = 0;
  std::vector<uint8_t> bytes;
  std::vector<float> deq;   // DequantizeRow
  std::vector<float> mins;  // |m| per block (0 without a min)
};

void PutF16(uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); }

Weights32 MakeWeights(DType type, int64_t n, int64_t k, uint32_t seed, Fill fill) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u01(0.0f, 1.0f);
  const int64_t bb = DTypeBlockBytes(type), nb = k / 32;
  Weights32 w{type, n, k, std::vector<uint8_t>(n * nb * bb), std::vector<float>(n * k),
              std::vector<float>(n * nb, 0.0f)};
  const uint16_t kExtremeF16[] = {0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x0000, 0x8000, 0x3C00};
  const uint16_t kWildF16[] = {0x7BFF, 0xFBFF, 0x0001, 0x7C00, 0xFC00, 0x7E00, 0x0000, 0x3C00};
  const uint8_t kExtremeE[] = {100, 144};
  const uint8_t kWildE[] = {0, 1, 2, 127, 128, 254, 255};
  for (int64_t blk = 0; blk < n * nb; ++blk) {
    uint8_t* p = w.bytes.data() + blk * bb;
    for (int64_t i = 0; i < bb; ++i) p[i] = static_cast<uint8_t>(rng());
    const bool extreme = fill != Fill::kRandom && rng() % 4 == 0;
    if (extreme) {  // payload (qh, qs) all set, all clear, alternating; 7: MXFP4's largest
      const uint8_t pat[] = {0xFF, 0x00, 0x0F, 0xF0, 0x77};
      const int64_t payload = type == DType::kMXFP4 ? 1 : HasMin(type) ? 4 : 2;
      std::memset(p + payload, pat[rng() % 5], static_cast<size_t>(bb - payload));
    }
    if (type == DType::kMXFP4) {
      if (fill == Fill::kWild && extreme) {
        p[0] = kWildE[rng() % 7];
      } else {
        p[0] = extreme ? kExtremeE[rng() % 2] : static_cast<uint8_t>(118 + rng() % 17);
      }
    } else {
      const float d = (0.002f + 0.098f * u01(rng)) * (rng() % 2 == 0 ? 1.0f : -1.0f);
      const float m = (u01(rng) * 1.2f - 0.9f) * 20.0f * std::fabs(d);
      const uint16_t* set = fill == Fill::kWild ? kWildF16 : kExtremeF16;
      const int count = fill == Fill::kWild ? 8 : 7;
      PutF16(p, extreme ? set[rng() % count] : F32ToF16(d));
      if (HasMin(type)) PutF16(p + 2, extreme ? set[rng() % count] : F32ToF16(m));
    }
    if (HasMin(type)) {
      uint16_t h;
      std::memcpy(&h, p + 2, 2);
      w.mins[blk] = std::fabs(F16ToF32(h));
    }
  }
  const int64_t rb = DTypeRowBytes(type, k);
  for (int64_t j = 0; j < n; ++j) DequantizeRow(w.bytes.data() + j * rb, type, k, w.deq.data() + j * k);
  return w;
}

struct Shape {
  int64_t m, k, n;
};

// Linear on one shape against the float64 product of the dequantized weights and the
// quantize-dequantized activations: within (2F + 4) u M + u |bias| (quant32_scalar.cc's
// bound, (F + 3) u M, with a factor 2 of slack), F the fmas per element, M the sum of
// (|w| + 2 |m|) |x|, which bounds every term the kernel adds.
void CheckLinear(const Shape& s, DType type, Fill fill, bool with_bias, int64_t ldy, ThreadPool* pool) {
  SCOPED_TRACE(Name(type) + " m=" + std::to_string(s.m) + " k=" + std::to_string(s.k) + " n=" +
               std::to_string(s.n) + " bias=" + std::to_string(with_bias) + " ldy=" + std::to_string(ldy));
  const Weights32 w = MakeWeights(type, s.n, s.k, static_cast<uint32_t>(7 + s.n + s.k), fill);
  const auto x = RandomVec(s.m * s.k, static_cast<uint32_t>(3 + s.m), -2.0f, 2.0f);
  const auto bias = RandomVec(s.n, 9);
  const float sentinel = -12345.0f;
  std::vector<float> y(s.m * ldy, sentinel);
  Linear(x.data(), s.m, s.k, w.bytes.data(), type, s.n, with_bias ? bias.data() : nullptr, y.data(), ldy, pool);
  const int64_t nb = s.k / 32;
  const double fmas = static_cast<double>(nb * (HasMin(type) ? 2 : 1));
  const double tight = (2.0 * fmas + 4.0) * 6e-8;
  for (int64_t i = 0; i < s.m; ++i) {
    const auto xd = QuantDequantActs(x.data() + i * s.k, s.k, 32);
    for (int64_t j = 0; j < s.n; ++j) {
      double ref = 0.0, mag = 0.0;
      for (int64_t kk = 0; kk < s.k; ++kk) {
        const double wd = w.deq[j * s.k + kk];
        ref += wd * xd[kk];
        mag += (std::fabs(wd) + 2.0 * w.mins[j * nb + kk / 32]) * std::fabs(xd[kk]);
      }
      const double b = with_bias ? bias[j] : 0.0;
      ASSERT_NEAR(y[i * ldy + j], ref + b, tight * mag + 6e-8 * std::fabs(b)) << "i=" << i << " j=" << j;
    }
    for (int64_t j = s.n; j < ldy; ++j) ASSERT_EQ(y[i * ldy + j], sentinel);
  }
}

class Quant32PathTest : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
    if (!UsePath(GetParam())) GTEST_SKIP() << "CPU lacks this path (AVX2/FMA/F16C or AVX-512 VNNI)";
  }
  void TearDown() override { ClearPath(); }
};

TEST_P(Quant32PathTest, LinearMatchesReference) {
  ThreadPool pool(2);
  for (DType type : kTypes) {
    for (const Shape& s : {Shape{1, 32, 1}, Shape{1, 96, 13}, Shape{3, 160, 24}, Shape{5, 64, 37},
                           Shape{17, 128, 7}, Shape{70, 64, 19}}) {
      CheckLinear(s, type, Fill::kRandom, s.n % 2 == 1, s.n, nullptr);
      CheckLinear(s, type, Fill::kExtremes, s.n % 2 == 0, s.n + 3, &pool);
    }
  }
}

// Every m in 1..70 (tiles of 1..4 rows, a 64-row chunk and a remainder), n not a multiple
// of 8 or 16 (and some that are), bias or not, weights with wild fields (inf/NaN scales,
// E8M0 0/1/255), and rows of zeros, huge values, a NaN, all 127 (the largest same-sign
// integer dots, where an int16 overflow would show) and +-127: the SIMD paths give the
// scalar bits (NaN compared as NaN).
TEST(Quant32KernelsTest, SimdPathsEqualScalarBitwiseEveryM) {
  ThreadPool pool(2);
  std::vector<Path> paths;
  for (Path p : {Path::kAvx2, Path::kVnni}) {
    if (UsePath(p)) paths.push_back(p);
  }
  ClearPath();
  if (paths.empty()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  for (DType type : kTypes) {
    for (int64_t m = 1; m <= 70; ++m) {
      const int64_t k = 32 * (2 + m % 4);
      const int64_t n = m % 5 == 0 ? 16 * (1 + m % 3) : 1 + (m * 13) % 53;
      const Fill fill = m % 2 == 0 ? Fill::kWild : Fill::kExtremes;
      SCOPED_TRACE(Name(type) + " m=" + std::to_string(m) + " k=" + std::to_string(k) + " n=" + std::to_string(n));
      const Weights32 w = MakeWeights(type, n, k, static_cast<uint32_t>(100 + m), fill);
      auto x = RandomVec(m * k, static_cast<uint32_t>(200 + m), -4.0f, 4.0f);
      if (m > 5) {
        std::fill(x.begin() + k, x.begin() + 2 * k, 0.0f);                 // row 1 zero
        for (int64_t i = 0; i < k; ++i) x[2 * k + i] *= 1e30f;             // row 2 huge
        x[3 * k + 17] = std::numeric_limits<float>::quiet_NaN();           // row 3 NaN
        x[2 * k + 5] = 1e-42f;                                             // a denormal
        std::fill(x.begin() + 5 * k, x.begin() + 6 * k, 1.0f);            // row 5: all 127
      }
      if (m > 6) {
        for (int64_t i = 0; i < k; ++i) x[6 * k + i] = (i % 3 == 0) ? -1.0f : 1.0f;  // +-127
      }
      const auto bias = RandomVec(n, 33);
      const float* bp = m % 3 == 0 ? nullptr : bias.data();
      ThreadPool* tp = m % 2 == 0 ? &pool : nullptr;
      std::vector<float> ys(m * n), ya(m * n);
      ASSERT_TRUE(UsePath(Path::kScalar));
      Linear(x.data(), m, k, w.bytes.data(), type, n, bp, ys.data(), n, tp);
      for (Path p : paths) {
        ASSERT_TRUE(UsePath(p));
        std::fill(ya.begin(), ya.end(), -1.0f);
        Linear(x.data(), m, k, w.bytes.data(), type, n, bp, ya.data(), n, tp);
        for (int64_t i = 0; i < m * n; ++i) {
          if (std::isnan(ya[i]) && std::isnan(ys[i])) continue;  // NaN sign/payload may differ
          ASSERT_TRUE(BitEqual(&ya[i], &ys[i], 1))
              << PathName(p) << " at " << i << ": " << ya[i] << " vs scalar " << ys[i];
        }
      }
      if (m > 5 && fill == Fill::kExtremes) {  // finite weights: the special rows' meaning
        for (int64_t j = 0; j < n; ++j) {
          EXPECT_EQ(ys[n + j], bp != nullptr ? bp[j] : 0.0f);  // zero row -> bias exactly
          EXPECT_TRUE(std::isnan(ys[3 * n + j]));               // NaN propagates
          EXPECT_TRUE(std::isfinite(ys[4 * n + j]));            // and stays in its row
        }
      }
    }
  }
  ClearPath();
}

// Row i of y is bitwise the same alone (M = 1, one thread), inside batches of 2..130 rows
// at any offset, and on 1 or 2 threads.
TEST_P(Quant32PathTest, LinearIsBatchInvariant) {
  ThreadPool pool2(2);
  const int64_t k = 256, n = 100, total = 130;
  const auto x = RandomVec(total * k, 21, -3.0f, 3.0f);
  const auto bias = RandomVec(n, 22);
  for (DType type : kTypes) {
    SCOPED_TRACE(Name(type));
    const Weights32 w = MakeWeights(type, n, k, 23, Fill::kExtremes);
    std::vector<float> alone(total * n);
    for (int64_t i = 0; i < total; i += 13) {
      Linear(x.data() + i * k, 1, k, w.bytes.data(), type, n, bias.data(), alone.data() + i * n, n, nullptr);
    }
    for (int64_t m : {2, 3, 5, 8, 17, 64, 65, 130}) {
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
        const int64_t off = m == total ? 0 : (m * 7) % (total - m);
        std::vector<float> y(m * n);
        Linear(x.data() + off * k, m, k, w.bytes.data(), type, n, bias.data(), y.data(), n, pool);
        for (int64_t r = 0; r < m; ++r) {
          if ((off + r) % 13 != 0) continue;
          ASSERT_TRUE(BitEqual(y.data() + r * n, alone.data() + (off + r) * n, n))
              << "m=" << m << " row " << off + r << " threads=" << (pool ? 2 : 1);
        }
      }
    }
  }
}

// Embedding and ConvertToF32 of these types are DequantizeRow, bitwise.
TEST_P(Quant32PathTest, EmbeddingDequantizes) {
  for (DType type : kTypes) {
    SCOPED_TRACE(Name(type));
    const int64_t vocab = 20, dim = 96;
    const Weights32 w = MakeWeights(type, vocab, dim, 51, Fill::kExtremes);
    const std::vector<int32_t> ids = {0, 19, 7, 7};
    std::vector<float> out(ids.size() * dim);
    Embedding(w.bytes.data(), type, dim, ids.data(), static_cast<int64_t>(ids.size()), out.data(), nullptr);
    for (size_t t = 0; t < ids.size(); ++t)
      ASSERT_TRUE(BitEqual(out.data() + t * dim, w.deq.data() + ids[t] * dim, dim)) << t;
    std::vector<float> all(vocab * dim);
    ConvertToF32(w.bytes.data(), type, vocab * dim, all.data());
    ASSERT_TRUE(BitEqual(all.data(), w.deq.data(), vocab * dim));
  }
}

// QuantLinearPath names the kernel these types run, following the overrides.
TEST(Quant32KernelsTest, PathSelection) {
  for (DType type : kTypes) {
    SCOPED_TRACE(Name(type));
    ASSERT_TRUE(UsePath(Path::kScalar));
    EXPECT_STREQ(QuantLinearPath(type, 16), "scalar");
    if (UsePath(Path::kAvx2)) {
      EXPECT_STREQ(QuantLinearPath(type, 16), "avx2");
    }
    if (UsePath(Path::kVnni)) {
      EXPECT_STREQ(QuantLinearPath(type, 1), "vnni");  // forced: every m
    }
  }
  ClearPath();
  if (UseAvx2() && UseAvx512Vnni()) {  // by default from the measured m (internal.h)
    EXPECT_STREQ(QuantLinearPath(DType::kIQ4_NL, 1), "avx2");
    EXPECT_STREQ(QuantLinearPath(DType::kMXFP4, 2), "vnni");
    EXPECT_STREQ(QuantLinearPath(DType::kQ5_0, 3), "avx2");
    EXPECT_STREQ(QuantLinearPath(DType::kQ4_1, 4), "vnni");
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, Quant32PathTest,
                         ::testing::Values(Path::kScalar, Path::kAvx2, Path::kVnni, Path::kDefault),
                         [](const ::testing::TestParamInfo<Path>& info) { return std::string(PathName(info.param)); });

// Quantized experts of these types: MoeExperts (grouped, 2 threads) gives each token
// exactly what its own chain of public ops gives; also with gate, up and down of
// different types (llama-quantize's recipes give ffn_down more bits).
TEST(Quant32KernelsTest, MoeExpertsOfTheseTypes) {
  const int64_t num = 3, hidden = 64, inter = 96, top_k = 2, tokens = 5;
  ThreadPool pool(2);
  std::vector<std::array<DType, 3>> cases;  // gate, up, down
  for (DType type : kTypes) cases.push_back({type, type, type});
  cases.push_back({kTypes[0], kTypes[1], kTypes[2]});
  cases.push_back({kTypes[3], kTypes[3], kTypes[4]});
  for (const auto& types : cases) {
    SCOPED_TRACE(std::string(Name(types[0])) + "/" + Name(types[1]) + "/" + Name(types[2]));
    std::vector<Weights32> mats;
    std::vector<const void*> gate, up, down;
    for (int64_t e = 0; e < num; ++e) {
      for (int part = 0; part < 3; ++part) {
        const bool is_down = part == 2;
        mats.push_back(MakeWeights(types[part], is_down ? hidden : inter, is_down ? inter : hidden,
                                   static_cast<uint32_t>(300 + 3 * e + part), Fill::kRandom));
      }
    }
    for (int64_t e = 0; e < num; ++e) {
      gate.push_back(mats[3 * e].bytes.data());
      up.push_back(mats[3 * e + 1].bytes.data());
      down.push_back(mats[3 * e + 2].bytes.data());
    }
    const auto x = RandomVec(tokens * hidden, 61);
    const auto logits = RandomVec(tokens * num, 62);
    std::vector<int32_t> ids(tokens * top_k);
    std::vector<float> wts(tokens * top_k), out(tokens * hidden);
    MoeRoute(logits.data(), tokens, num, top_k, true, ids.data(), wts.data());
    MoeExpertsArgs a;
    a.x = x.data();
    a.tokens = tokens;
    a.hidden = hidden;
    a.inter = inter;
    a.top_k = top_k;
    a.num_experts = num;
    a.topk_ids = ids.data();
    a.topk_weights = wts.data();
    a.gate_dtype = types[0];
    a.up_dtype = types[1];
    a.down_dtype = types[2];
    a.gate = gate.data();
    a.up = up.data();
    a.down = down.data();
    a.out = out.data();
    MoeScratch scratch;
    MoeExperts(a, &scratch, &pool);
    for (int64_t t = 0; t < tokens; ++t) {
      std::vector<float> want(hidden), gu(2 * inter), act(inter), y(hidden);
      for (int64_t j = 0; j < top_k; ++j) {
        const int32_t e = ids[t * top_k + j];
        const float* xt = x.data() + t * hidden;
        Linear(xt, 1, hidden, gate[e], types[0], inter, nullptr, gu.data(), 2 * inter, nullptr);
        Linear(xt, 1, hidden, up[e], types[1], inter, nullptr, gu.data() + inter, 2 * inter, nullptr);
        SiluMul(gu.data(), 1, inter, act.data(), nullptr);
        Linear(act.data(), 1, inter, down[e], types[2], hidden, nullptr, y.data(), hidden, nullptr);
        const float wj = wts[t * top_k + j];
        for (int64_t i = 0; i < hidden; ++i) want[i] = j == 0 ? wj * y[i] : want[i] + wj * y[i];
      }
      ASSERT_TRUE(BitEqual(out.data() + t * hidden, want.data(), hidden)) << "token " << t;
      bool nonzero = false;
      for (float v : want) nonzero |= v != 0.0f;
      EXPECT_TRUE(nonzero) << "token " << t;
    }
  }
}

}  // namespace
}  // namespace tessera::kernels::cpu
