// Block-quantized weights (Q8_0, Q4_0, Q4_K): the reference quantizers of
// common/quant.h, and the int8 Linear/Embedding kernels against a double-precision
// reference on the dequantized weights and independently quantized activations, on
// the scalar, AVX2 and AVX-512 VNNI paths, plus bitwise batch invariance and
// AVX2 == scalar == VNNI.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "common/quant.h"
#include "common/thread_pool.h"
#include "kernels/cpu/ops.h"
#include "tests/unit/kernels/kernel_test_util.h"
#include "tests/unit/kernels/quant_test_util.h"

namespace tessera::kernels::cpu {
namespace {

using namespace qtest;  // NOLINT: the shared helpers (quant_test_util.h)

// n rows of k quantized with the reference quantizer, plus the dequantized values.
struct QWeights {
  DType type;
  int64_t n, k;
  std::vector<uint8_t> bytes;
  std::vector<float> src;  // the f32 values that were quantized
  std::vector<float> deq;  // DequantizeRow of bytes
};

QWeights MakeQWeights(DType type, int64_t n, int64_t k, uint32_t seed) {
  QWeights w{type, n, k, {}, RandomVec(n * k, seed), std::vector<float>(n * k)};
  // Vary the row magnitudes so per-block scales differ a lot.
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < k; ++i) w.src[j * k + i] *= 0.05f + 0.1f * static_cast<float>(j % 7);
  const int64_t rb = DTypeRowBytes(type, k);
  w.bytes.resize(n * rb);
  for (int64_t j = 0; j < n; ++j) {
    QuantizeRow(w.src.data() + j * k, k, type, w.bytes.data() + j * rb);
    DequantizeRow(w.bytes.data() + j * rb, type, k, w.deq.data() + j * k);
  }
  return w;
}

int64_t ActBlockOf(DType t) { return t == DType::kQ4_K ? 256 : 32; }

class QuantPathTest : public PathTest {};

struct Shape {
  int64_t m, k, n;
};

// Checks Linear on one shape: tight against the reference on dequantized operands,
// loose against the f32 product (quantization error).
void CheckQuantLinear(const Shape& s, DType type, bool with_bias, int64_t ldy, ThreadPool* pool) {
  SCOPED_TRACE(std::string(DTypeName(type)) + " m=" + std::to_string(s.m) + " k=" +
               std::to_string(s.k) + " n=" + std::to_string(s.n) + " bias=" +
               std::to_string(with_bias) + " ldy=" + std::to_string(ldy));
  const QWeights w = MakeQWeights(type, s.n, s.k, 11 + s.n);
  const auto x = RandomVec(s.m * s.k, 5 + s.k, -2.0f, 2.0f);
  const auto bias = RandomVec(s.n, 9);
  const float sentinel = -12345.0f;
  std::vector<float> y(s.m * ldy, sentinel);
  Linear(x.data(), s.m, s.k, w.bytes.data(), type, s.n, with_bias ? bias.data() : nullptr,
         y.data(), ldy, pool);
  const int64_t nb = s.k / ActBlockOf(type);
  // Float chain of nb fmas (+ f32 scale products and int->float roundings): relative
  // error below ~(2 nb + 4) eps of the sum of |terms|.
  const double tight = (2.0 * nb + 4) * 6e-8;
  // Quantization: Q8_0 weights within d/2 + f16 rounding of d (<= amax/254 + amax/2048),
  // Q4_0 within d = amax/8 at the clamped edge, Q4_K within a step of its sub-block
  // (<= range/15) plus the 6-bit min rounding; activations within amax_x/254. The sum
  // of |x_i||w_i| bounds the relative effect.
  const double loose = type == DType::kQ8_0 ? 0.015 : type == DType::kQ4_0 ? 0.16 : 0.2;
  for (int64_t i = 0; i < s.m; ++i) {
    const auto xd = QuantDequantActs(x.data() + i * s.k, s.k, ActBlockOf(type));
    for (int64_t j = 0; j < s.n; ++j) {
      double ref = 0.0, mag = 0.0, f32 = 0.0, amax_w = 0.0, amax_x = 0.0;
      for (int64_t kk = 0; kk < s.k; ++kk) {
        const double wd = w.deq[j * s.k + kk];
        ref += wd * xd[kk];
        mag += std::fabs(wd * xd[kk]);
        f32 += static_cast<double>(w.src[j * s.k + kk]) * x[i * s.k + kk];
        amax_w = std::max(amax_w, std::fabs(static_cast<double>(w.src[j * s.k + kk])));
        amax_x = std::max(amax_x, std::fabs(static_cast<double>(x[i * s.k + kk])));
      }
      const double b = with_bias ? bias[j] : 0.0;
      const double got = y[i * ldy + j];
      ASSERT_NEAR(got, ref + b, tight * mag + 1e-6 * std::fabs(b)) << "i=" << i << " j=" << j;
      ASSERT_NEAR(got, f32 + b, loose * s.k * amax_w * amax_x) << "i=" << i << " j=" << j;
    }
    for (int64_t j = s.n; j < ldy; ++j) ASSERT_EQ(y[i * ldy + j], sentinel);
  }
}

TEST_P(QuantPathTest, LinearMatchesReference) {
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    for (const Shape& s : {Shape{1, 32, 1}, Shape{1, 96, 13}, Shape{2, 288, 8}, Shape{3, 160, 24},
                           Shape{5, 64, 37}, Shape{4, 896, 9}, Shape{17, 128, 7}, Shape{33, 224, 26}}) {
      CheckQuantLinear(s, type, s.n % 2 == 1, s.n, nullptr);
      CheckQuantLinear(s, type, s.n % 2 == 0, s.n + 5, nullptr);
    }
  }
  for (const Shape& s : {Shape{1, 256, 1}, Shape{2, 512, 13}, Shape{7, 256, 24}, Shape{33, 768, 9}}) {
    CheckQuantLinear(s, DType::kQ4_K, true, s.n, nullptr);
    CheckQuantLinear(s, DType::kQ4_K, false, s.n + 3, nullptr);
  }
}

TEST_P(QuantPathTest, LinearLargeMThreaded) {
  ThreadPool pool(2);
  CheckQuantLinear({512, 96, 19}, DType::kQ8_0, true, 19, &pool);
  CheckQuantLinear({512, 64, 11}, DType::kQ4_0, false, 13, &pool);
  CheckQuantLinear({130, 256, 17}, DType::kQ4_K, true, 17, &pool);
  CheckQuantLinear({1, 1024, 1000}, DType::kQ4_0, true, 1000, &pool);
  CheckQuantLinear({70, 128, 50}, DType::kQ8_0, false, 53, &pool);  // 64-row chunk + 6
}

// Row i of y is bitwise the same alone (M = 1), inside batches of 2..64 and 512
// rows at any offset, and on 1 or 2 threads.
TEST_P(QuantPathTest, LinearIsBatchInvariant) {
  ThreadPool pool2(2);
  const int64_t k = 512, n = 1000, total = 512;
  const auto x = RandomVec(total * k, 21, -3.0f, 3.0f);
  const auto bias = RandomVec(n, 22);
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K}) {
    SCOPED_TRACE(std::string(DTypeName(type)));
    const QWeights w = MakeQWeights(type, n, k, 23);
    std::vector<float> alone(total * n);
    for (int64_t i = 0; i < total; i += 37) {  // a sample of rows, alone, one thread
      Linear(x.data() + i * k, 1, k, w.bytes.data(), type, n, bias.data(), alone.data() + i * n,
             n, nullptr);
    }
    for (int64_t m : {2, 3, 4, 5, 8, 16, 33, 64, 512}) {
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
        const int64_t off = m == 512 ? 0 : (m * 7) % (total - m);
        std::vector<float> y(m * n);
        Linear(x.data() + off * k, m, k, w.bytes.data(), type, n, bias.data(), y.data(), n, pool);
        for (int64_t r = 0; r < m; ++r) {
          if ((off + r) % 37 != 0) continue;
          ASSERT_TRUE(BitEqual(y.data() + r * n, alone.data() + (off + r) * n, n))
              << "m=" << m << " row " << off + r << " threads=" << (pool ? 2 : 1);
        }
      }
    }
  }
}

// Every SIMD path computes the scalar sequence: bitwise equal outputs, including
// rows with zeros, huge values and a NaN (which poisons only its own row), and shapes
// with partial column groups (n % 16 != 0) and more rows than one chunk (64).
void CheckPathEqualsScalar(Path path) {
  ThreadPool pool(2);
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K}) {
    SCOPED_TRACE(std::string(DTypeName(type)));
    for (const Shape& s : {Shape{1, 256, 37}, Shape{6, 512, 64}, Shape{70, 768, 29},
                           Shape{3, 1024, 100}, Shape{130, 256, 47}}) {
      SCOPED_TRACE("m=" + std::to_string(s.m) + " n=" + std::to_string(s.n));
      const QWeights w = MakeQWeights(type, s.n, s.k, 31);
      ExpectPathEqualsScalar(path, type, s.m, s.k, s.n, w.bytes.data(), &pool);
    }
  }
  ClearPath();
}

TEST(QuantKernelsTest, Avx2EqualsScalarBitwise) {
  if (!UsePath(Path::kAvx2)) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  CheckPathEqualsScalar(Path::kAvx2);
}

// The names QuantLinearPath reports follow the overrides and the CPU.
TEST(QuantKernelsTest, PathSelection) {
  ASSERT_TRUE(UsePath(Path::kScalar));
  EXPECT_STREQ(QuantLinearPath(DType::kQ4_0, 16), "scalar");
  if (UsePath(Path::kAvx2)) {
    EXPECT_STREQ(QuantLinearPath(DType::kQ4_0, 16), "avx2");
    EXPECT_STREQ(QuantLinearPath(DType::kQ4_K, 16), "avx2");
    EXPECT_STREQ(QuantLinearPath(DType::kQ4_K, 1), "gemv");  // decode: straight from the blocks
    EXPECT_STREQ(QuantLinearPath(DType::kQ4_0, 1), "avx2");  // no such kernel
  }
  if (UsePath(Path::kVnni)) {
    EXPECT_STREQ(QuantLinearPath(DType::kQ8_0, 1), "vnni");  // forced: every m
    EXPECT_STREQ(QuantLinearPath(DType::kQ4_0, 1), "vnni");
    EXPECT_STREQ(QuantLinearPath(DType::kQ4_K, 1), "vnni");
  }
  ClearPath();
  if (UseAvx2() && UseAvx512Vnni()) {
    EXPECT_STREQ(QuantLinearPath(DType::kQ8_0, 1), "avx2");
    EXPECT_STREQ(QuantLinearPath(DType::kQ8_0, 16), "vnni");
    EXPECT_STREQ(QuantLinearPath(DType::kQ4_K, 1), "gemv");
    EXPECT_STREQ(QuantLinearPath(DType::kQ4_K, 16), "vnni");
  }
}

TEST(QuantKernelsTest, VnniEqualsScalarBitwise) {
  if (!UsePath(Path::kVnni)) GTEST_SKIP() << "CPU lacks AVX-512 VNNI (or AVX2)";
  CheckPathEqualsScalar(Path::kVnni);
}

// Weights at the extremes of each type (Q8_0 -128/127, Q4_0 nibbles 0/15) against
// activations at +-127: the largest int32 block dots, where a wrong offset or a
// saturating instruction would show.
TEST(QuantKernelsTest, ExtremeWeightsAllPathsEqual) {
  ThreadPool pool(2);
  const int64_t m = 5, k = 256, n = 35;
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    SCOPED_TRACE(std::string(DTypeName(type)));
    const int64_t rb = DTypeRowBytes(type, k);
    std::vector<uint8_t> wbytes(n * rb);
    std::vector<float> src(k);
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < k; ++i) {
        // Q8_0: a block's amax at -1 gives -127 (quantizers are symmetric), so
        // -128 is written into the bytes directly below.
        src[i] = ((i + j) % 2 == 0) ? 1.0f : -1.0f;
      }
      QuantizeRow(src.data(), k, type, wbytes.data() + j * rb);
    }
    if (type == DType::kQ8_0) {  // bytes 2..33 of each 34-byte block: some exactly -128
      for (int64_t j = 0; j < n; ++j)
        for (int64_t b = 0; b < k / 32; ++b)
          for (int l = 0; l < 32; l += 3) wbytes[j * rb + b * 34 + 2 + l] = 0x80;
    }
    std::vector<float> x(m * k);
    for (int64_t i = 0; i < m * k; ++i) x[i] = (i % 5 < 2) ? -1.0f : 1.0f;
    std::vector<float> ref(m * n), got(m * n);
    ASSERT_TRUE(UsePath(Path::kScalar));
    Linear(x.data(), m, k, wbytes.data(), type, n, nullptr, ref.data(), n, &pool);
    // Independent check of one element: exact integer dot times the scales.
    {
      std::vector<float> deq(k);
      DequantizeRow(wbytes.data(), type, k, deq.data());
      double want = 0.0;
      for (int64_t i = 0; i < k; ++i) want += static_cast<double>(deq[i]) * x[i];
      EXPECT_NEAR(ref[0], want, 1e-4 * std::fabs(want) + 1e-4);
    }
    for (Path p : {Path::kAvx2, Path::kVnni}) {
      if (!UsePath(p)) continue;
      Linear(x.data(), m, k, wbytes.data(), type, n, nullptr, got.data(), n, &pool);
      ASSERT_TRUE(BitEqual(got.data(), ref.data(), m * n)) << "path " << static_cast<int>(p);
    }
  }
  ClearPath();
}

// --- Reference quantizers (common/quant.h).

struct RowCase {
  const char* name;
  std::vector<float> v;
};

std::vector<RowCase> RowCases(int64_t n) {
  std::vector<RowCase> cases;
  cases.push_back({"random", RandomVec(n, 41)});
  cases.push_back({"zero", std::vector<float>(n, 0.0f)});
  cases.push_back({"constant", std::vector<float>(n, 0.375f)});
  cases.push_back({"negative-constant", std::vector<float>(n, -2.5f)});
  auto huge = RandomVec(n, 42);
  for (int64_t i = 0; i < n; ++i) huge[i] *= (i % 5 == 0) ? 3e4f : 1e-3f;  // big range in a block
  cases.push_back({"huge-range", huge});
  auto pos = RandomVec(n, 43, 0.5f, 4.0f);
  cases.push_back({"all-positive", pos});
  return cases;
}

TEST(QuantReferenceTest, RoundTripErrorBounds) {
  const int64_t n = 512;
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K}) {
    const int64_t be = DTypeBlockElems(type);
    for (const RowCase& c : RowCases(n)) {
      SCOPED_TRACE(std::string(DTypeName(type)) + " " + c.name);
      std::vector<uint8_t> q(DTypeRowBytes(type, n));
      std::vector<float> back(n);
      QuantizeRow(c.v.data(), n, type, q.data());
      DequantizeRow(q.data(), type, n, back.data());
      for (int64_t b = 0; b < n / be; ++b) {
        const float* src = c.v.data() + b * be;
        float amax = 0.0f;
        for (int64_t i = 0; i < be; ++i) amax = std::max(amax, std::fabs(src[i]));
        for (int64_t i = 0; i < be; ++i) {
          const float got = back[b * be + i];
          ASSERT_TRUE(std::isfinite(got)) << "i=" << b * be + i;
          double bound = 0.0;
          if (type == DType::kQ8_0) {
            bound = amax / 254.0 + amax / 2048.0;  // d/2, plus d rounded to f16
          } else if (type == DType::kQ4_0) {
            // d = amax/8: within d/2, except the side opposite the max, which clamps
            // at nibble 15 (-7 d): within d; plus d rounded to f16 (8 d 2^-11).
            bound = amax / 8.0 + amax / 2048.0;
          } else {
            // Sub-block of 32: range [lo, hi] (holding 0) stepped by d*sc ~ (hi-lo)/15,
            // the 6-bit scale and min rounded to d/2, dmin/2 of the block's largest.
            const int64_t sb = i / 32 * 32;
            float lo = 0.0f, hi = 0.0f, bmax_range = 0.0f, bmax_min = 0.0f;
            for (int64_t l = 0; l < 32; ++l) {
              lo = std::min(lo, src[sb + l]);
              hi = std::max(hi, src[sb + l]);
            }
            for (int64_t t = 0; t < 8; ++t) {
              float tl = 0.0f, th = 0.0f;
              for (int64_t l = 0; l < 32; ++l) {
                tl = std::min(tl, src[32 * t + l]);
                th = std::max(th, src[32 * t + l]);
              }
              bmax_range = std::max(bmax_range, th - tl);
              bmax_min = std::max(bmax_min, -tl);
            }
            const double step = (hi - lo) / 15.0 + bmax_range / 15.0 / 63.0;
            bound = step / 2.0 + bmax_min / 63.0 / 2.0 + 16 * (bmax_range / 15.0 / 63.0) +
                    1e-3 * amax;
          }
          ASSERT_LE(std::fabs(got - src[i]), bound + 1e-30) << "i=" << b * be + i;
        }
      }
      if (std::string(c.name) == "zero") {
        for (float v : back) ASSERT_EQ(v, 0.0f);
      }
    }
  }
}

TEST(QuantReferenceTest, Q8_0AndQ4_0ExactOnGrid) {
  // Values on the grid of their own block scale come back exactly.
  std::vector<float> v(64);
  for (int i = 0; i < 64; ++i) v[i] = static_cast<float>((i % 15) - 7) * 0.25f;
  v[0] = v[32] = -2.0f;  // Q4_0: max magnitude -8 * 0.25 in both blocks: d = 0.25
  std::vector<uint8_t> q(DTypeRowBytes(DType::kQ4_0, 64));
  std::vector<float> back(64);
  QuantizeRow(v.data(), 64, DType::kQ4_0, q.data());
  DequantizeRow(q.data(), DType::kQ4_0, 64, back.data());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(back[i], v[i]) << i;
  for (int i = 0; i < 64; ++i) v[i] = static_cast<float>((i * 37) % 255 - 127) * 0.5f;
  v[0] = v[32] = 63.5f;  // amax 127 * 0.5 in both blocks: d = 0.5 exactly
  std::vector<uint8_t> q8(DTypeRowBytes(DType::kQ8_0, 64));
  QuantizeRow(v.data(), 64, DType::kQ8_0, q8.data());
  DequantizeRow(q8.data(), DType::kQ8_0, 64, back.data());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(back[i], v[i]) << i;
}

TEST_P(QuantPathTest, EmbeddingAndConvertDequantize) {
  ThreadPool pool(2);
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K}) {
    SCOPED_TRACE(std::string(DTypeName(type)));
    const int64_t vocab = 300, dim = 512;
    const QWeights w = MakeQWeights(type, vocab, dim, 51);
    const std::vector<int32_t> ids = {0, 299, 17, 17, 150, 3};
    std::vector<float> out(ids.size() * dim);
    Embedding(w.bytes.data(), type, dim, ids.data(), static_cast<int64_t>(ids.size()), out.data(),
              &pool);
    for (size_t t = 0; t < ids.size(); ++t)
      ASSERT_TRUE(BitEqual(out.data() + t * dim, w.deq.data() + ids[t] * dim, dim)) << t;
    std::vector<float> all(vocab * dim);
    ConvertToF32(w.bytes.data(), type, vocab * dim, all.data());
    ASSERT_TRUE(BitEqual(all.data(), w.deq.data(), vocab * dim));
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, QuantPathTest,
                         ::testing::Values(Path::kScalar, Path::kAvx2, Path::kVnni, Path::kDefault),
                         [](const ::testing::TestParamInfo<Path>& info) { return std::string(PathName(info.param)); });

}  // namespace
}  // namespace tessera::kernels::cpu
