// QuantizeRow for every weight type: the round trip through DequantizeRow stays within a
// per-type bound (the gguf-py-equal quantizers are checked bytewise against gguf-py in
// tests/reference/test_gguf_py_oracle.py; this bounds the simple K-quant/IQ4 fits).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/quant.h"

namespace tessera {
namespace {

struct Bound {
  DType type;
  double rel_rms;    // sqrt(sum err^2 / sum x^2) over the matrix
  double max_frac;   // max |err| / (amax of the row), the worst element
};

// Measured on this data (gaussian rows with 1% outliers of 8x) and given ~25% room; a
// broken layout or scale gives errors of the order of the values themselves (rel_rms ~1).
constexpr Bound kBounds[] = {
    {DType::kQ8_0, 0.010, 0.005},  {DType::kQ4_0, 0.16, 0.08},  {DType::kQ4_1, 0.12, 0.075},
    {DType::kQ5_0, 0.082, 0.04},   {DType::kQ5_1, 0.06, 0.035}, {DType::kQ2_K, 0.46, 0.27},
    {DType::kQ3_K, 0.24, 0.16},    {DType::kQ4_K, 0.12, 0.075}, {DType::kQ5_K, 0.06, 0.035},
    {DType::kQ6_K, 0.03, 0.02},    {DType::kIQ4_NL, 0.13, 0.10}, {DType::kIQ4_XS, 0.13, 0.10},
    {DType::kMXFP4, 0.17, 0.27},
};

std::vector<float> Rows(int rows, int k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows) * k);
  for (float& v : x) v = g(rng) * (u(rng) < 0.01f ? 8.0f : 1.0f);
  return x;
}

TEST(QuantFit, RoundTripErrorIsBounded) {
  constexpr int kRows = 8, kK = 1024;
  const std::vector<float> x = Rows(kRows, kK, 11);
  for (const Bound& b : kBounds) {
    const int64_t row_bytes = DTypeRowBytes(b.type, kK);
    std::vector<uint8_t> q(row_bytes * kRows);
    std::vector<float> back(x.size());
    double err2 = 0, x2 = 0, worst = 0;
    for (int r = 0; r < kRows; ++r) {
      const float* xr = x.data() + r * kK;
      QuantizeRow(xr, kK, b.type, q.data() + r * row_bytes);
      DequantizeRow(q.data() + r * row_bytes, b.type, kK, back.data() + r * kK);
      double amax = 0;
      for (int i = 0; i < kK; ++i) amax = std::max(amax, std::fabs(static_cast<double>(xr[i])));
      for (int i = 0; i < kK; ++i) {
        const double e = static_cast<double>(back[r * kK + i]) - xr[i];
        ASSERT_TRUE(std::isfinite(back[r * kK + i])) << DTypeName(b.type);
        err2 += e * e;
        x2 += static_cast<double>(xr[i]) * xr[i];
        worst = std::max(worst, std::fabs(e) / amax);
      }
    }
    const double rel = std::sqrt(err2 / x2);
    EXPECT_LT(rel, b.rel_rms) << DTypeName(b.type);
    EXPECT_LT(worst, b.max_frac) << DTypeName(b.type);
    // Not trivially small either: a quantizer that stored the input losslessly would
    // not be one of these formats.
    EXPECT_GT(rel, b.rel_rms / 20) << DTypeName(b.type);
  }
}

TEST(QuantFit, ZerosAndConstantsAndDeterminism) {
  constexpr int kK = 512;
  for (const Bound& b : kBounds) {
    const int64_t row_bytes = DTypeRowBytes(b.type, kK);
    std::vector<uint8_t> q(row_bytes), q2(row_bytes);
    std::vector<float> back(kK);
    const std::vector<float> zeros(kK, 0.0f);
    QuantizeRow(zeros.data(), kK, b.type, q.data());
    DequantizeRow(q.data(), b.type, kK, back.data());
    for (float v : back) ASSERT_EQ(v, 0.0f) << DTypeName(b.type);
    // A row of one repeated value comes back within the type's relative step.
    const std::vector<float> ones(kK, -0.75f);
    QuantizeRow(ones.data(), kK, b.type, q.data());
    DequantizeRow(q.data(), b.type, kK, back.data());
    for (float v : back) ASSERT_NEAR(v, -0.75f, 0.75f * b.max_frac) << DTypeName(b.type);
    const std::vector<float> x = Rows(1, kK, 5);
    QuantizeRow(x.data(), kK, b.type, q.data());
    QuantizeRow(x.data(), kK, b.type, q2.data());
    EXPECT_EQ(q, q2) << DTypeName(b.type);
  }
}

}  // namespace
}  // namespace tessera
