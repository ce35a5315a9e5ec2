// CUDA RMSNorm against the CPU kernel.
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/ops.h"
#include "tests/cuda/cuda_test_util.h"
#include "kernels/cuda/rms_norm.cuh"

namespace tessera::kernels {
namespace {

TEST(CudaRmsNormTest, MatchesCpuAndIsBatchInvariant) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (int64_t dim : {7, 64, 896, 4097}) {
    const int64_t rows = 13;
    std::vector<float> x(rows * dim), w(dim), cpu(rows * dim), gpu(rows * dim), one(dim);
    for (auto& v : x) v = nd(rng);
    for (auto& v : w) v = 1.f + 0.1f * nd(rng);
    cpu::RmsNorm(x.data(), w.data(), rows, dim, 1e-6f, cpu.data(), nullptr);
    float *dx, *dw, *dout;
    ASSERT_EQ(cudaMalloc(&dx, x.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dw, w.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dout, x.size() * 4), cudaSuccess);
    cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice);
    ASSERT_EQ(cuda::RmsNorm(dx, dw, rows, dim, 1e-6f, dout, nullptr), cudaSuccess);
    cudaMemcpy(gpu.data(), dout, x.size() * 4, cudaMemcpyDeviceToHost);
    for (int64_t i = 0; i < rows * dim; ++i) {
      EXPECT_NEAR(gpu[i], cpu[i], 1e-5f * (1.f + std::fabs(cpu[i]))) << "dim " << dim << " i " << i;
    }
    // Row 5 alone equals row 5 inside the batch, bitwise.
    ASSERT_EQ(cuda::RmsNorm(dx + 5 * dim, dw, 1, dim, 1e-6f, dout, nullptr), cudaSuccess);
    cudaMemcpy(one.data(), dout, dim * 4, cudaMemcpyDeviceToHost);
    EXPECT_EQ(0, std::memcmp(one.data(), gpu.data() + 5 * dim, dim * 4));
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dout);
  }
}

}  // namespace
}  // namespace tessera::kernels
