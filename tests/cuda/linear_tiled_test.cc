// CUDA LinearTiled (the batch-invariant GEMM) against two host references: a
// double-precision sum (accuracy) and the contract's own f32 fmaf chain in
// ascending k (bitwise), plus batch invariance in m and in n tiling.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "kernels/cuda/linear_tiled.cuh"
#include "tests/cuda/cuda_test_util.h"

namespace tessera::kernels {
namespace {

using cuda_test::BitwiseEqual;
using cuda_test::DeviceBuffer;
using cuda_test::RandomNormal;
using cuda::ElemType;

// Weights of type t on the host (raw bytes) and as the exact f32 values they hold.
struct HostWeights {
  std::vector<uint8_t> bytes;
  std::vector<float> f32;
};

HostWeights MakeWeights(int64_t n, int64_t k, ElemType t, uint32_t seed) {
  HostWeights w;
  w.f32 = RandomNormal(n * k, seed, 0.5f);
  if (t == ElemType::kF32) {
    w.bytes.resize(w.f32.size() * 4);
    if (!w.bytes.empty()) std::memcpy(w.bytes.data(), w.f32.data(), w.bytes.size());
    return w;
  }
  w.bytes.resize(w.f32.size() * 2);
  for (size_t i = 0; i < w.f32.size(); ++i) {
    const uint16_t h = t == ElemType::kF16 ? F32ToF16(w.f32[i]) : F32ToBf16(w.f32[i]);
    w.f32[i] = t == ElemType::kF16 ? F16ToF32(h) : Bf16ToF32(h);
    std::memcpy(w.bytes.data() + 2 * i, &h, 2);
  }
  return w;
}

struct Case {
  int64_t m, n, k;
  ElemType type;
  bool bias;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "m " << c.m << " n " << c.n << " k " << c.k << " type " << static_cast<int>(c.type) << " bias " << c.bias;
}

class CudaLinearTiledTest : public testing::TestWithParam<Case> {};

TEST_P(CudaLinearTiledTest, MatchesFmaChainBitwiseAndDoubleWithinBound) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  const Case c = GetParam();
  const int64_t ldy = c.n + 3;
  // One spare element each, so k = 0 still uploads non-empty buffers.
  const std::vector<float> x = RandomNormal(c.m * c.k + 1, 201 + c.k);
  HostWeights w = MakeWeights(c.n, c.k, c.type, 202 + c.n);
  w.bytes.resize(w.bytes.size() + 4);
  const std::vector<float> bias = RandomNormal(c.n, 203);
  const float kPad = -7.25f;  // ldy padding must stay untouched
  DeviceBuffer<float> dx(x), dbias(bias), dy(std::vector<float>(c.m * ldy, kPad));
  DeviceBuffer<uint8_t> dw(w.bytes);
  ASSERT_EQ(cuda::LinearTiled(dx.get(), c.m, c.k, dw.get(), c.type, c.n, c.bias ? dbias.get() : nullptr, dy.get(),
                              ldy, nullptr),
            cudaSuccess);
  const std::vector<float> y = dy.Download();
  int bad = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < ldy; ++j) {
      const float got = y[i * ldy + j];
      if (j >= c.n) {
        EXPECT_EQ(got, kPad);
        continue;
      }
      float chain = 0.f;  // the contract: one fmaf chain over ascending k, then + bias
      double exact = 0.0, mag = 0.0;
      for (int64_t kk = 0; kk < c.k; ++kk) {
        const float a = x[i * c.k + kk], b = w.f32[j * c.k + kk];
        chain = std::fmaf(a, b, chain);
        exact += static_cast<double>(a) * b;
        mag += std::fabs(static_cast<double>(a) * b);
      }
      if (c.bias) {
        chain = chain + bias[j];
        exact += bias[j];
        mag += std::fabs(bias[j]);
      }
      // Recursive f32 summation error bound: (k + 1) * 2^-24 * sum |terms|.
      const double bound = (c.k + 1) * std::ldexp(1.0, -24) * mag + 1e-30;
      if (bad < 5 && (std::memcmp(&got, &chain, 4) != 0 || std::fabs(got - exact) > bound)) {
        ADD_FAILURE() << "y[" << i << ", " << j << "] = " << got << ", fmaf chain " << chain << ", exact " << exact
                      << " (bound " << bound << ")";
        ++bad;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaLinearTiledTest,
    testing::Values(Case{1, 1, 1, ElemType::kF32, false}, Case{37, 67, 129, ElemType::kF32, true},
                    Case{64, 64, 64, ElemType::kF32, false}, Case{65, 130, 33, ElemType::kBF16, true},
                    Case{3, 200, 96, ElemType::kF16, false}, Case{7, 5, 31, ElemType::kBF16, false},
                    Case{2, 9, 0, ElemType::kF32, true}, Case{130, 17, 40, ElemType::kF16, true},
                    Case{16, 33, 64, ElemType::kF32, true}, Case{17, 33, 65, ElemType::kBF16, false},
                    Case{70, 150, 515, ElemType::kBF16, true}),
    [](const testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      const char* type = c.type == ElemType::kF32 ? "f32" : c.type == ElemType::kF16 ? "f16" : "bf16";
      return "m" + std::to_string(c.m) + "_n" + std::to_string(c.n) + "_k" + std::to_string(c.k) + "_" + type +
             (c.bias ? "_bias" : "");
    });

// Row i's result does not depend on m (m = 1 vs inside m = 37 and m = 100) nor on
// where its column falls in the n tiling (a launch over columns 13.. of w).
TEST(CudaLinearTiledInvarianceTest, RowAloneEqualsRowInsideBatchAndTilingBitwise) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  for (ElemType t : {ElemType::kF32, ElemType::kBF16}) {
    SCOPED_TRACE(static_cast<int>(t));
    const int64_t k = 77, n = 90, big_m = 100, row = 11, n0 = 13;
    const std::vector<float> x = RandomNormal(big_m * k, 301), bias = RandomNormal(n, 302);
    const HostWeights w = MakeWeights(n, k, t, 303);
    DeviceBuffer<float> dx(x), dbias(bias), y37(37 * n), y100(big_m * n), y1(n), ysub(n - n0);
    DeviceBuffer<uint8_t> dw(w.bytes);
    ASSERT_EQ(cuda::LinearTiled(dx.get(), 37, k, dw.get(), t, n, dbias.get(), y37.get(), n, nullptr), cudaSuccess);
    ASSERT_EQ(cuda::LinearTiled(dx.get(), big_m, k, dw.get(), t, n, dbias.get(), y100.get(), n, nullptr),
              cudaSuccess);
    ASSERT_EQ(cuda::LinearTiled(dx.get() + row * k, 1, k, dw.get(), t, n, dbias.get(), y1.get(), n, nullptr),
              cudaSuccess);
    const int64_t esize = t == ElemType::kF32 ? 4 : 2;
    ASSERT_EQ(cuda::LinearTiled(dx.get() + row * k, 1, k, dw.get() + n0 * k * esize, t, n - n0, dbias.get() + n0,
                                ysub.get(), n - n0, nullptr),
              cudaSuccess);
    const std::vector<float> a = y1.Download(), b = y37.Download(), c = y100.Download(), d = ysub.Download();
    EXPECT_TRUE(BitwiseEqual(a.data(), b.data() + row * n, n));
    EXPECT_TRUE(BitwiseEqual(a.data(), c.data() + row * n, n));
    EXPECT_TRUE(BitwiseEqual(a.data() + n0, d.data(), n - n0));
    // Row 70 (second m tile of the m = 100 launch) alone.
    ASSERT_EQ(cuda::LinearTiled(dx.get() + 70 * k, 1, k, dw.get(), t, n, dbias.get(), y1.get(), n, nullptr),
              cudaSuccess);
    EXPECT_TRUE(BitwiseEqual(y1.Download().data(), c.data() + 70 * n, n));
  }
}

TEST(CudaLinearTiledInvarianceTest, EmptyAndInvalidShapes) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  DeviceBuffer<float> buf(std::vector<float>{1.f, 2.f});
  EXPECT_EQ(cuda::LinearTiled(buf.get(), 0, 2, buf.get(), ElemType::kF32, 1, nullptr, buf.get(), 1, nullptr),
            cudaSuccess);
  EXPECT_EQ(cuda::LinearTiled(buf.get(), 1, 1, buf.get(), ElemType::kF32, 2, nullptr, buf.get(), 1, nullptr),
            cudaErrorInvalidValue);  // ldy < n
  EXPECT_EQ(buf.Download(), (std::vector<float>{1.f, 2.f}));
}

}  // namespace
}  // namespace tessera::kernels
