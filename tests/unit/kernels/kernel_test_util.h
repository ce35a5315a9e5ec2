// Helpers shared by the CPU kernel tests: random inputs, bitwise comparison, and the
// choice of kernel path (scalar / AVX2 / AVX-512 VNNI / the detected default).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "kernels/cpu/ops.h"

namespace tessera::kernels::cpu {

inline std::vector<float> RandomVec(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline bool BitEqual(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

// kDefault: the detected dispatch, which on a VNNI CPU mixes AVX2 (small m) and VNNI.
enum class Path { kScalar, kAvx2, kVnni, kDefault };

inline void ClearPath() {
  ClearUseAvx2ForTesting();
  ClearUseAvx512VnniForTesting();
}

// gtest prints and names parameters with these.
inline void PrintTo(Path p, std::ostream* os) {
  static const char* const kNames[] = {"Scalar", "Avx2", "Vnni", "Default"};
  *os << kNames[static_cast<int>(p)];
}
inline std::string PathName(const ::testing::TestParamInfo<Path>& info) {
  std::ostringstream os;
  PrintTo(info.param, &os);
  return os.str();
}

// Selects one kernel path; false when this CPU lacks it.
inline bool UsePath(Path p) {
  if (p == Path::kDefault) {
    ClearPath();
    return true;
  }
  if (!SetUseAvx2ForTesting(p != Path::kScalar)) return false;
  return SetUseAvx512VnniForTesting(p == Path::kVnni);
}

// A test run once per path; skipped (visibly) where the CPU lacks the path.
class PathTest : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
    if (!UsePath(GetParam())) GTEST_SKIP() << "CPU lacks this path (AVX2/FMA/F16C or AVX-512 VNNI)";
  }
  void TearDown() override { ClearPath(); }
};

// Quantized Linear [m, k] x w[n, k] of `type` on `path` and on the scalar path: bitwise
// equal outputs. Inputs: random in +-4 with, when m > 3, row 1 zero, row 2 huge (x 1e30,
// one denormal), row 3 holding a NaN, and when m > 5 row 5 at +-1 everywhere (+-127 when
// quantized); then the zero row gives the bias exactly and the NaN stays in its row.
inline void ExpectPathEqualsScalar(Path path, DType type, int64_t m, int64_t k, int64_t n,
                                   const uint8_t* w, ThreadPool* pool) {
  auto x = RandomVec(m * k, 32, -4.0f, 4.0f);
  if (m > 3) {
    std::fill(x.begin() + k, x.begin() + 2 * k, 0.0f);         // row 1 zero
    for (int64_t i = 0; i < k; ++i) x[2 * k + i] *= 1e30f;     // row 2 huge
    x[3 * k + 17] = std::numeric_limits<float>::quiet_NaN();   // row 3 NaN
    x[2 * k + 5] = 1e-42f;                                     // a denormal
  }
  if (m > 5) {
    for (int64_t i = 0; i < k; ++i) x[5 * k + i] = (i % 3 == 0) ? -1.0f : 1.0f;
  }
  const auto bias = RandomVec(n, 33);
  std::vector<float> ya(m * n), ys(m * n);
  ASSERT_TRUE(UsePath(path));
  Linear(x.data(), m, k, w, type, n, bias.data(), ya.data(), n, pool);
  ASSERT_TRUE(UsePath(Path::kScalar));
  Linear(x.data(), m, k, w, type, n, bias.data(), ys.data(), n, pool);
  for (int64_t i = 0; i < m * n; ++i) {
    if (std::isnan(ya[i]) && std::isnan(ys[i])) continue;  // NaN sign/payload may differ
    ASSERT_TRUE(BitEqual(&ya[i], &ys[i], 1)) << "m=" << m << " at " << i << ": " << ya[i] << " vs " << ys[i];
  }
  if (m > 4) {
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(ya[n + j], bias[j]);               // zero row -> bias exactly
      EXPECT_TRUE(std::isnan(ya[3 * n + j]));      // NaN propagates
      EXPECT_TRUE(std::isfinite(ya[4 * n + j]));   // and stays in its row
    }
  }
}

}  // namespace tessera::kernels::cpu
