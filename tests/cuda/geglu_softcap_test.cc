// CUDA GeluTanhMul, Scale and SoftCap (Gemma's elementwise ops) against an f64
// evaluation of their equations, and rows computed alone equal to rows in a batch.
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/geglu_softcap.cuh"
#include "tests/cuda/cuda_test_util.h"

namespace tessera::kernels {
namespace {

using cuda_test::BitwiseEqual;
using cuda_test::DeviceBuffer;
using cuda_test::RandomNormal;

double GeluTanh(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

TEST(CudaGeluTanhMulTest, MatchesDoubleAndIsBatchInvariant) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  for (int64_t inter : {1, 7, 64, 130}) {
    SCOPED_TRACE(testing::Message() << "inter " << inter);
    const int64_t rows = 4;
    std::vector<float> gu = RandomNormal(rows * 2 * inter, 91 + inter, 3.f);
    gu[0] = -30.f;  // exp overflow side: gelu -> -0
    DeviceBuffer<float> dgu(gu), dout(rows * inter), d1(inter);
    ASSERT_EQ(cuda::GeluTanhMul(dgu.get(), rows, inter, dout.get(), nullptr), cudaSuccess);
    const std::vector<float> got = dout.Download();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < inter; ++i) {
        const double want = GeluTanh(gu[r * 2 * inter + i]) * gu[r * 2 * inter + inter + i];
        EXPECT_NEAR(got[r * inter + i], want, 1e-6 * (1.0 + std::fabs(want))) << r << "," << i;
      }
    }
    ASSERT_EQ(cuda::GeluTanhMul(dgu.get() + 2 * 2 * inter, 1, inter, d1.get(), nullptr), cudaSuccess);
    EXPECT_TRUE(BitwiseEqual(d1.Download().data(), got.data() + 2 * inter, inter));
  }
}

TEST(CudaScaleSoftCapTest, MatchDouble) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  const std::vector<float> x = RandomNormal(1000, 93, 40.f);
  DeviceBuffer<float> a(x), b(x);
  ASSERT_EQ(cuda::Scale(a.get(), 1000, 0.25f, nullptr), cudaSuccess);
  ASSERT_EQ(cuda::SoftCap(b.get(), 1000, 30.f, nullptr), cudaSuccess);
  const std::vector<float> sa = a.Download(), sb = b.Download();
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(sa[i], x[i] * 0.25f) << i;
    const double want = 30.0 * std::tanh(x[i] / 30.0);
    EXPECT_NEAR(sb[i], want, 2e-6 * 30.0) << i;
    EXPECT_LE(std::fabs(sb[i]), 30.f) << i;
  }
}

}  // namespace
}  // namespace tessera::kernels
