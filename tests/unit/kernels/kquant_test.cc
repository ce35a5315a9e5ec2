// Quantized Linear for the 256-element types Q2_K, Q3_K, Q5_K, Q6_K and IQ4_XS
// (kernels/cpu/kquant_*.cc): random valid blocks and blocks at the extremes of every field,
// against a float64 product of DequantizeRow's weights with independently quantized
// activations (the bound of kquant_scalar.cc); scalar == AVX2 == AVX-512 VNNI bitwise; a
// row alone == in a batch; 1 thread == 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/quant.h"
#include "common/thread_pool.h"
#include "kernels/cpu/ops.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace tessera::kernels::cpu {
namespace {

constexpr DType kTypes[] = {DType::kQ6_K, DType::kQ5_K, DType::kIQ4_XS, DType::kQ3_K, DType::kQ2_K};

// Byte offsets of the f16 fields (d, and dmin where the type has mins; -1: none).
struct F16Fields {
  int d, dmin;
};
F16Fields FieldsOf(DType t) {
  switch (t) {
    case DType::kQ2_K: return {static_cast<int>(offsetof(BlockQ2_K, d)), static_cast<int>(offsetof(BlockQ2_K, dmin))};
    case DType::kQ3_K: return {static_cast<int>(offsetof(BlockQ3_K, d)), -1};
    case DType::kQ5_K: return {static_cast<int>(offsetof(BlockQ5_K, d)), static_cast<int>(offsetof(BlockQ5_K, dmin))};
    case DType::kQ6_K: return {static_cast<int>(offsetof(BlockQ6_K, d)), -1};
    default: return {static_cast<int>(offsetof(BlockIQ4_XS, d)), -1};
  }
}

// How the non-f16 bytes are filled: random, or one byte everywhere (0x00: hmask clear,
// scales at their lowest; 0xFF: every value, scale and min field at its max, hmask set;
// 0x80 / 0x7F: Q6_K's int8 scales at -128 / 127).
enum class Fill { kRandom, k00, kFF, k80, k7F };

struct KWeights {
  DType type;
  int64_t n, k;
  std::vector<uint8_t> bytes;
  std::vector<float> deq;   // DequantizeRow
  std::vector<float> mins;  // per element: dmin * min of its group (Q2_K, Q5_K), else 0
};

float MinOf(DType t, const uint8_t* blk, int e) {
  if (t == DType::kQ2_K) {
    const auto& b = *reinterpret_cast<const BlockQ2_K*>(blk);
    return F16ToF32(b.dmin) * static_cast<float>(b.scales[e / 16] >> 4);
  }
  if (t == DType::kQ5_K) {
    const auto& b = *reinterpret_cast<const BlockQ5_K*>(blk);
    uint8_t sc, m;
    Q4KScaleMin(b.scales, e / 32, &sc, &m);
    return F16ToF32(b.dmin) * static_cast<float>(m);
  }
  return 0.0f;
}

KWeights MakeKWeights(DType type, int64_t n, int64_t k, uint32_t seed, Fill fill) {
  const int64_t rb = DTypeRowBytes(type, k), bb = DTypeBlockBytes(type);
  KWeights w{type, n, k, std::vector<uint8_t>(n * rb), std::vector<float>(n * k), std::vector<float>(n * k)};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> mag(0.002f, 0.05f);
  const F16Fields f = FieldsOf(type);
  for (int64_t blk = 0; blk < n * k / 256; ++blk) {
    uint8_t* p = w.bytes.data() + blk * bb;
    for (int64_t i = 0; i < bb; ++i) {
      p[i] = static_cast<uint8_t>(fill == Fill::kRandom ? byte(rng)
                                  : fill == Fill::k00   ? 0x00
                                  : fill == Fill::kFF   ? 0xFF
                                  : fill == Fill::k80   ? 0x80
                                                        : 0x7F);
    }
    // Finite f16 scales of either sign (d), row magnitudes varying by block.
    const float d = (byte(rng) % 2 == 0 ? 1.0f : -1.0f) * mag(rng) * static_cast<float>(1 + blk % 5);
    const uint16_t dh = F32ToF16(fill == Fill::kRandom ? d : 0.5f);
    std::memcpy(p + f.d, &dh, 2);
    if (f.dmin >= 0) {
      const uint16_t mh = F32ToF16(fill == Fill::kRandom ? mag(rng) : 0.25f);
      std::memcpy(p + f.dmin, &mh, 2);
    }
  }
  for (int64_t j = 0; j < n; ++j) {
    DequantizeRow(w.bytes.data() + j * rb, type, k, w.deq.data() + j * k);
    for (int64_t e = 0; e < k; ++e)
      w.mins[j * k + e] = MinOf(type, w.bytes.data() + j * rb + (e / 256) * bb, static_cast<int>(e % 256));
  }
  return w;
}

// The activation quantization Linear documents (ops.h), written independently: per 256
// values d = amax / 127, q = round-half-even(clamp(x / d, +-127)).
std::vector<double> QuantDequantActs(const float* x, int64_t k) {
  std::vector<double> out(k);
  for (int64_t b = 0; b < k / 256; ++b) {
    float amax = 0.0f;
    for (int64_t l = 0; l < 256; ++l) amax = std::max(amax, std::fabs(x[b * 256 + l]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int64_t l = 0; l < 256; ++l) {
      const float v = std::clamp(x[b * 256 + l] * id, -127.0f, 127.0f);
      out[b * 256 + l] = static_cast<double>(d) * std::nearbyint(v);
    }
  }
  return out;
}

class KQuantPathTest : public PathTest {};

struct Shape {
  int64_t m, k, n;
};

// Linear on one shape against the float64 oracle, within (F + 6) 2^-24 of the sum of the
// terms' magnitudes (kquant_scalar.cc: F fmas per row, DequantizeRow's rounding, slack).
void CheckAgainstOracle(const Shape& s, DType type, Fill fill, bool with_bias, int64_t ldy) {
  SCOPED_TRACE(std::string(DTypeName(type)) + " m=" + std::to_string(s.m) + " k=" + std::to_string(s.k) +
               " n=" + std::to_string(s.n) + " fill=" + std::to_string(static_cast<int>(fill)));
  const KWeights w = MakeKWeights(type, s.n, s.k, 11 + static_cast<uint32_t>(s.n), fill);
  auto x = RandomVec(s.m * s.k, 5 + static_cast<uint32_t>(s.k), -2.0f, 2.0f);
  if (fill != Fill::kRandom) {  // activations at +-127 too: the largest integer sums
    for (int64_t i = 0; i < s.m * s.k; ++i) x[i] = (i % 7 < 3) ? -1.0f : 1.0f;
  }
  const auto bias = RandomVec(s.n, 9, -1.0f, 1.0f);
  const float sentinel = -12345.0f;
  std::vector<float> y(s.m * ldy, sentinel);
  Linear(x.data(), s.m, s.k, w.bytes.data(), type, s.n, with_bias ? bias.data() : nullptr, y.data(), ldy,
         nullptr);
  const bool has_min = type == DType::kQ2_K || type == DType::kQ5_K;
  const double fmas = static_cast<double>(s.k / 256) * (has_min ? 2 : 1);
  const double tol = (fmas + 6) * std::ldexp(1.0, -24);
  for (int64_t i = 0; i < s.m; ++i) {
    const auto xd = QuantDequantActs(x.data() + i * s.k, s.k);
    for (int64_t j = 0; j < s.n; ++j) {
      double ref = 0.0, mag = 0.0;
      for (int64_t e = 0; e < s.k; ++e) {
        const double wd = w.deq[j * s.k + e], mn = std::fabs(static_cast<double>(w.mins[j * s.k + e]));
        ref += wd * xd[e];
        mag += (std::fabs(wd) + 2 * mn) * std::fabs(xd[e]);
      }
      const double b = with_bias ? bias[j] : 0.0;
      ASSERT_NEAR(y[i * ldy + j], ref + b, tol * mag + 1e-6 * std::fabs(b)) << "i=" << i << " j=" << j;
    }
    for (int64_t j = s.n; j < ldy; ++j) ASSERT_EQ(y[i * ldy + j], sentinel);
  }
}

TEST_P(KQuantPathTest, LinearMatchesOracle) {
  for (DType type : kTypes) {
    for (const Shape& s : {Shape{1, 256, 1}, Shape{2, 512, 13}, Shape{5, 256, 37}, Shape{17, 768, 9},
                           Shape{70, 256, 19}}) {
      CheckAgainstOracle(s, type, Fill::kRandom, s.n % 2 == 1, s.n);
      CheckAgainstOracle(s, type, Fill::kRandom, s.n % 2 == 0, s.n + 3);
    }
    for (Fill fill : {Fill::k00, Fill::kFF, Fill::k80, Fill::k7F})
      CheckAgainstOracle({3, 512, 17}, type, fill, true, 17);
  }
}

// Row i of y is bitwise the same alone (m = 1), inside batches of 2..70 rows at any
// offset (70: a 64-row chunk and 6), and on 1 or 2 threads.
TEST_P(KQuantPathTest, LinearIsBatchInvariant) {
  ThreadPool pool2(2);
  const int64_t k = 512, n = 200, total = 80;
  const auto x = RandomVec(total * k, 21, -3.0f, 3.0f);
  const auto bias = RandomVec(n, 22, -1.0f, 1.0f);
  for (DType type : kTypes) {
    SCOPED_TRACE(std::string(DTypeName(type)));
    const KWeights w = MakeKWeights(type, n, k, 23, Fill::kRandom);
    std::vector<float> alone(total * n);
    for (int64_t i = 0; i < total; ++i)
      Linear(x.data() + i * k, 1, k, w.bytes.data(), type, n, bias.data(), alone.data() + i * n, n, nullptr);
    for (int64_t m : {2, 5, 16, 33, 70}) {
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
        const int64_t off = (m * 7) % (total - m);
        std::vector<float> y(m * n);
        Linear(x.data() + off * k, m, k, w.bytes.data(), type, n, bias.data(), y.data(), n, pool);
        for (int64_t r = 0; r < m; ++r) {
          ASSERT_TRUE(BitEqual(y.data() + r * n, alone.data() + (off + r) * n, n))
              << "m=" << m << " row " << off + r << " threads=" << (pool ? 2 : 1);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, KQuantPathTest,
                         ::testing::Values(Path::kScalar, Path::kAvx2, Path::kVnni, Path::kDefault),
                         PathName);

// Every SIMD path computes the scalar sequence (kernel_test_util.h: special rows, NaN
// in its own row) for every fill, with partial column groups (n % 8, n % 16 != 0) and
// more rows than a chunk (64).
void CheckPathEqualsScalar(Path path) {
  ThreadPool pool(2);
  for (DType type : kTypes) {
    for (Fill fill : {Fill::kRandom, Fill::k00, Fill::kFF, Fill::k80, Fill::k7F}) {
      for (const Shape& s : {Shape{1, 256, 37}, Shape{6, 512, 64}, Shape{70, 768, 29}, Shape{3, 1024, 21}}) {
        if (fill != Fill::kRandom && s.m != 6) continue;
        SCOPED_TRACE(std::string(DTypeName(type)) + " fill=" + std::to_string(static_cast<int>(fill)) +
                     " m=" + std::to_string(s.m));
        const KWeights w = MakeKWeights(type, s.n, s.k, 31, fill);
        ExpectPathEqualsScalar(path, type, s.m, s.k, s.n, w.bytes.data(), &pool);
      }
    }
  }
  ClearPath();
}

TEST(KQuantKernelsTest, Avx2EqualsScalarBitwise) {
  if (!UsePath(Path::kAvx2)) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  CheckPathEqualsScalar(Path::kAvx2);
}

TEST(KQuantKernelsTest, VnniEqualsScalarBitwise) {
  if (!UsePath(Path::kVnni)) GTEST_SKIP() << "CPU lacks AVX-512 VNNI (or AVX2)";
  CheckPathEqualsScalar(Path::kVnni);
}

// The VNNI kernel serves every type when forced, and by default only from the m where
// it is the faster one.
TEST(KQuantKernelsTest, PathSelection) {
  for (DType type : kTypes) {
    SCOPED_TRACE(std::string(DTypeName(type)));
    ASSERT_TRUE(UsePath(Path::kScalar));
    EXPECT_STREQ(QuantLinearPath(type, 16), "scalar");
    // Decode-sized m takes the kernel that reads the packed blocks directly, where one exists.
    const char* m1 = "gemv";
    if (UsePath(Path::kAvx2)) {
      EXPECT_STREQ(QuantLinearPath(type, 16), "avx2");
      EXPECT_STREQ(QuantLinearPath(type, 1), m1);
      EXPECT_STREQ(QuantLinearPath(type, 2), m1);
      EXPECT_STREQ(QuantLinearPath(type, 3), "avx2");
    }
    if (UsePath(Path::kVnni)) {
      EXPECT_STREQ(QuantLinearPath(type, 1), "vnni");
    }
    ClearPath();
    if (UseAvx2() && UseAvx512Vnni()) {
      EXPECT_STREQ(QuantLinearPath(type, 1), m1);
      EXPECT_STREQ(QuantLinearPath(type, 64), "vnni");
    }
  }
}

}  // namespace
}  // namespace tessera::kernels::cpu
