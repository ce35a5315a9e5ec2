// CUDA RMSNorm, fused add + RMSNorm and per-head RMSNorm against the CPU kernels.
#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/head_rms_norm.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "tests/cuda/cuda_test_util.h"

namespace tessera::kernels {
namespace {

using cuda_test::BitwiseEqual;
using cuda_test::DeviceBuffer;
using cuda_test::RandomNormal;

constexpr float kEps = 1e-6f;

std::vector<float> Weights(int64_t dim, uint32_t seed) {
  std::vector<float> w = RandomNormal(dim, seed, 0.1f);
  for (auto& v : w) v += 1.f;
  return w;
}

void ExpectNearRel(const std::vector<float>& got, const std::vector<float>& want, float rel, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 5; ++i) {
    if (!(std::fabs(got[i] - want[i]) <= rel * (1.f + std::fabs(want[i])))) {
      ADD_FAILURE() << what << " i " << i << ": " << got[i] << " vs " << want[i];
      ++bad;
    }
  }
}

TEST(CudaRmsNormTest, MatchesCpuAndIsBatchInvariant) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  for (int64_t dim : {1, 7, 64, 896, 4097}) {
    SCOPED_TRACE(dim);
    const int64_t rows = 6;
    const std::vector<float> x = RandomNormal(rows * dim, 3 + dim), w = Weights(dim, 4);
    std::vector<float> cpu(rows * dim);
    cpu::RmsNorm(x.data(), w.data(), rows, dim, kEps, cpu.data(), nullptr);
    DeviceBuffer<float> dx(x), dw(w), dout(rows * dim), done(dim);
    ASSERT_EQ(cuda::RmsNorm(dx.get(), dw.get(), rows, dim, kEps, dout.get(), nullptr), cudaSuccess);
    const std::vector<float> gpu = dout.Download();
    ExpectNearRel(gpu, cpu, 1e-5f, "RmsNorm");
    // Row 4 alone equals row 4 inside the batch, bitwise.
    ASSERT_EQ(cuda::RmsNorm(dx.get() + 4 * dim, dw.get(), 1, dim, kEps, done.get(), nullptr), cudaSuccess);
    EXPECT_TRUE(BitwiseEqual(done.Download().data(), gpu.data() + 4 * dim, dim));
    // In place (out == x) gives the same bits.
    ASSERT_EQ(cuda::RmsNorm(dx.get(), dw.get(), rows, dim, kEps, dx.get(), nullptr), cudaSuccess);
    EXPECT_TRUE(BitwiseEqual(dx.Download().data(), gpu.data(), rows * dim));
  }
}

// dim % 4 == 0 runs float4 loads when the pointers are 16-byte aligned and scalar
// loads otherwise; both must reduce in the same order (same bits). Magnitudes
// spread over many binades make a changed summation order show in the result,
// and so do the first rows: a^2 then squares just under half an ulp of a^2 each,
// which vanish added one by one after a^2 but not summed first.
TEST(CudaRmsNormTest, VectorAndScalarPathsAgreeBitwise) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  for (int64_t dim : {8, 1028}) {
    SCOPED_TRACE(dim);
    const int64_t rows = dim == 8 ? 12 : 2, n = rows * dim;
    std::vector<float> x = RandomNormal(n + 1, 11 + dim);
    const std::vector<float> spread = RandomNormal(n + 1, 13, 4.f);
    for (int64_t i = 0; i <= n; ++i) x[i] *= std::exp2(std::round(spread[i]));
    for (int64_t r = 0; r < 4 && dim == 8; ++r) {
      const float a = 1.f + 0.1f * static_cast<float>(r);
      const float small = std::sqrt(0.4f * std::nextafter(a * a, 4.f) - 0.4f * (a * a));
      for (int64_t i = 0; i < dim; ++i) x[r * dim + i] = i % 4 == 0 ? a : small;
    }
    const std::vector<float> w = Weights(dim + 1, 12);
    // Shifted copies: x, w, residual and out one float past a 16-byte boundary.
    std::vector<float> x_shift(n + 1), w_shift(dim + 1);
    std::memcpy(x_shift.data() + 1, x.data(), n * 4);
    std::memcpy(w_shift.data() + 1, w.data(), dim * 4);
    DeviceBuffer<float> dx(x), dw(w), dxs(x_shift), dws(w_shift), out_a(n + 1), out_b(n + 1);
    ASSERT_EQ(cuda::RmsNorm(dx.get(), dw.get(), rows, dim, kEps, out_a.get(), nullptr), cudaSuccess);
    ASSERT_EQ(cuda::RmsNorm(dxs.get() + 1, dws.get() + 1, rows, dim, kEps, out_b.get() + 1, nullptr), cudaSuccess);
    EXPECT_TRUE(BitwiseEqual(out_a.Download().data(), out_b.Download().data() + 1, n));
    // The fused add: residual = x[1..] aligned vs shifted.
    std::vector<float> r_shift(n + 1);
    std::memcpy(r_shift.data() + 1, x.data() + 1, n * 4);
    DeviceBuffer<float> dr(std::vector<float>(x.begin() + 1, x.end())), drs(r_shift);
    ASSERT_EQ(cuda::AddRmsNorm(dr.get(), dx.get(), dw.get(), rows, dim, kEps, out_a.get(), nullptr), cudaSuccess);
    ASSERT_EQ(cuda::AddRmsNorm(drs.get() + 1, dx.get(), dws.get() + 1, rows, dim, kEps, out_b.get() + 1, nullptr),
              cudaSuccess);
    EXPECT_TRUE(BitwiseEqual(out_a.Download().data(), out_b.Download().data() + 1, n));
    EXPECT_TRUE(BitwiseEqual(dr.Download().data(), drs.Download().data() + 1, n));
  }
}

TEST(CudaRmsNormTest, AddRmsNormMatchesCpuAndIsBatchInvariant) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  for (int64_t dim : {1, 5, 64, 896, 2051}) {
    SCOPED_TRACE(dim);
    const int64_t rows = 5;
    const std::vector<float> res0 = RandomNormal(rows * dim, 21 + dim, 3.f), x = RandomNormal(rows * dim, 22);
    const std::vector<float> w = Weights(dim, 23);
    std::vector<float> cpu_res = res0, cpu_out(rows * dim);
    cpu::AddRmsNorm(cpu_res.data(), x.data(), w.data(), rows, dim, kEps, cpu_out.data(), nullptr);
    DeviceBuffer<float> dres(res0), dx(x), dw(w), dout(rows * dim);
    ASSERT_EQ(cuda::AddRmsNorm(dres.get(), dx.get(), dw.get(), rows, dim, kEps, dout.get(), nullptr),
              cudaSuccess);
    const std::vector<float> gpu_res = dres.Download(), gpu_out = dout.Download();
    // residual + x is one f32 add on both sides: exact.
    EXPECT_TRUE(BitwiseEqual(gpu_res.data(), cpu_res.data(), rows * dim));
    ExpectNearRel(gpu_out, cpu_out, 1e-5f, "AddRmsNorm");
    // Row 4 alone (fresh residual) equals row 4 of the batch, bitwise.
    DeviceBuffer<float> r1(std::vector<float>(res0.begin() + 4 * dim, res0.begin() + 5 * dim)), o1(dim);
    ASSERT_EQ(cuda::AddRmsNorm(r1.get(), dx.get() + 4 * dim, dw.get(), 1, dim, kEps, o1.get(), nullptr),
              cudaSuccess);
    EXPECT_TRUE(BitwiseEqual(o1.Download().data(), gpu_out.data() + 4 * dim, dim));
    EXPECT_TRUE(BitwiseEqual(r1.Download().data(), gpu_res.data() + 4 * dim, dim));
  }
}

TEST(CudaRmsNormTest, ZeroRowsIsANoOp) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  DeviceBuffer<float> buf(std::vector<float>{1.f, 2.f, 3.f, 4.f});
  EXPECT_EQ(cuda::RmsNorm(buf.get(), buf.get(), 0, 4, kEps, buf.get(), nullptr), cudaSuccess);
  EXPECT_EQ(cuda::AddRmsNorm(buf.get(), buf.get(), buf.get(), 0, 4, kEps, buf.get(), nullptr), cudaSuccess);
  EXPECT_EQ(cuda::HeadRmsNorm(buf.get(), 0, 2, 2, 4, buf.get(), kEps, nullptr), cudaSuccess);
  EXPECT_EQ(buf.Download(), (std::vector<float>{1.f, 2.f, 3.f, 4.f}));
}

TEST(CudaHeadRmsNormTest, MatchesCpuPerHeadAndIsBatchInvariant) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  for (int64_t head_dim : {1, 16, 33, 64, 128}) {
    SCOPED_TRACE(head_dim);
    const int64_t tokens = 7, heads = 3, stride = heads * head_dim + 5;  // 5 untouched floats per row
    const std::vector<float> x = RandomNormal(tokens * stride, 31 + head_dim, 2.f), w = Weights(head_dim, 32);
    // Reference: the CPU RMSNorm over each (token, head) vector; padding unchanged.
    std::vector<float> want = x;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        float* v = want.data() + t * stride + h * head_dim;
        cpu::RmsNorm(v, w.data(), 1, head_dim, kEps, v, nullptr);
      }
    }
    DeviceBuffer<float> dx(x), dw(w);
    ASSERT_EQ(cuda::HeadRmsNorm(dx.get(), tokens, heads, head_dim, stride, dw.get(), kEps, nullptr), cudaSuccess);
    const std::vector<float> got = dx.Download();
    ExpectNearRel(got, want, 1e-5f, "HeadRmsNorm");
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t c = heads * head_dim; c < stride; ++c) EXPECT_EQ(got[t * stride + c], x[t * stride + c]);
    }
    // Token 5 alone equals token 5 of the batch, bitwise.
    DeviceBuffer<float> d1(std::vector<float>(x.begin() + 5 * stride, x.begin() + 6 * stride));
    ASSERT_EQ(cuda::HeadRmsNorm(d1.get(), 1, heads, head_dim, stride, dw.get(), kEps, nullptr), cudaSuccess);
    EXPECT_TRUE(BitwiseEqual(d1.Download().data(), got.data() + 5 * stride, stride));
  }
}

}  // namespace
}  // namespace tessera::kernels
