// CUDA semantics the kernels rely on, checked on the GPU and on the emulator
// alike; plus the emulator's own bug detectors (emulator build only).
#include <chrono>
#include <cstdio>
#include <vector>

#include <gtest/gtest.h>

#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/selftest_kernels.cuh"

namespace tessera::cuda_test {
namespace {

TEST(CudaSelfTest, SharedMemoryTreeReduction) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  std::vector<float> in(3 * 256);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i % 17);
  DeviceBuffer<float> din(in), dout(3);
  ASSERT_EQ(BlockSum(din.get(), 3, dout.get(), nullptr), cudaSuccess);
  const std::vector<float> out = dout.Download();
  for (int b = 0; b < 3; ++b) {
    float want = 0;
    for (int i = 0; i < 256; ++i) want += in[b * 256 + i];
    EXPECT_EQ(out[b], want) << b;
  }
}

TEST(CudaSelfTest, WarpShufflesAndBallot) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  DeviceBuffer<int> dout(64 * 5);
  ASSERT_EQ(WarpOps(dout.get(), nullptr), cudaSuccess);
  const std::vector<int> out = dout.Download();
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, base = t - lane;
    EXPECT_EQ(out[t * 5 + 0], (base + (lane ^ 5)) * 10) << t;
    EXPECT_EQ(out[t * 5 + 1], (lane + 3 < 32 ? t + 3 : t) * 10) << t;
    EXPECT_EQ(out[t * 5 + 2], (lane >= 2 ? t - 2 : t) * 10) << t;
    EXPECT_EQ(out[t * 5 + 3], (base + 7) * 10) << t;
    EXPECT_EQ(static_cast<unsigned>(out[t * 5 + 4]), 0xaaaaaaaau) << t;
  }
}

TEST(CudaSelfTest, AtomicsCountEveryThread) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  DeviceBuffer<int> counter(1);
  ASSERT_EQ(AtomicCount(counter.get(), 5, nullptr), cudaSuccess);
  EXPECT_EQ(counter.Download()[0], 5 * 128);
}

TEST(CudaSelfTest, GraphReplayReadsCurrentInputs) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  const int n = 300;
  DeviceBuffer<float> x(n);
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, n * sizeof(float)), cudaSuccess);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(x.get(), pinned, n * sizeof(float), cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(Affine(x.get(), n, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(pinned, x.get(), n * sizeof(float), cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < n; ++i) pinned[i] = static_cast<float>(i + round);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    for (int i = 0; i < n; ++i) ASSERT_EQ(pinned[i], 2.0f * static_cast<float>(i + round) + 1.0f) << i;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaFreeHost(pinned);
  cudaStreamDestroy(s);
}

TEST(CudaSelfTest, BarrierHeavyKernelCost) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  DeviceBuffer<float> out(128);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(ManyBarriers(out.get(), 200, nullptr), cudaSuccess);
  const std::vector<float> o = out.Download();
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  float want = 0;
  for (int r = 0; r < 200; ++r) want += static_cast<float>(r + 1);
  EXPECT_EQ(o[0], want);
  std::printf("400 barriers x 128 threads: %.0f us (%.3f us per thread switch)\n", us, us / (400.0 * 128));
}

#if defined(TESSERA_CUDA_EMU)
// The emulator's checks that stand in for compute-sanitizer and the driver.
TEST(CudaEmulatorTest, MemcpyDirectionAndBoundsAreChecked) {
  DeviceBuffer<float> d(4);
  std::vector<float> h(8);
  EXPECT_NE(cudaMemcpy(d.get(), h.data(), 8 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);  // past the end
  EXPECT_NE(cudaMemcpy(h.data(), d.get(), 4 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);  // swapped
  EXPECT_EQ(cudaMemcpy(h.data(), d.get(), 4 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaGetLastError();
}

TEST(CudaEmulatorTest, CaptureRejectsUnsafeCalls) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  DeviceBuffer<float> d(4);
  std::vector<float> pageable(4);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_NE(cudaMemcpyAsync(d.get(), pageable.data(), 16, cudaMemcpyHostToDevice, s), cudaSuccess);
  void* p = nullptr;
  EXPECT_NE(cudaMalloc(&p, 16), cudaSuccess);
  cudaGraph_t g;
  EXPECT_NE(cudaStreamEndCapture(s, &g), cudaSuccess);  // invalidated
  cudaGetLastError();
  cudaStreamDestroy(s);
}

TEST(CudaEmulatorDeathTest, DivergentBarrierIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // Lane 0 waits at __syncthreads while lanes 1..31 wait for it at a warp sync.
  EXPECT_DEATH(::tessera::emu::Launch({dim3(1), dim3(32), 0, nullptr, "divergent"},
                                      [] {
                                        if (threadIdx.x == 0) {
                                          __syncthreads();
                                        } else {
                                          __syncwarp();
                                        }
                                      }),
               "no barrier can be released");
}

TEST(CudaEmulatorDeathTest, ShuffleNamingAnExitedLaneIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(::tessera::emu::Launch({dim3(1), dim3(32), 0, nullptr, "early-exit"},
                                      [] {
                                        if (threadIdx.x >= 16) return;
                                        (void)__shfl_xor_sync(0xffffffffu, 1.0f, 1);
                                      }),
               "has exited");
}

#if defined(__SANITIZE_ADDRESS__)
#define TESSERA_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TESSERA_TEST_ASAN 1
#endif
#endif
#if defined(TESSERA_TEST_ASAN)
// Under ASan the emulator doubles as a memory checker: a kernel reading past its
// allocation is reported like compute-sanitizer's memcheck would.
TEST(CudaEmulatorDeathTest, OutOfBoundsKernelReadIsReportedUnderAsan) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        DeviceBuffer<float> x(32);
        float* p = x.get();
        volatile float sink = 0;
        ::tessera::emu::Launch({dim3(1), dim3(33), 0, nullptr, "oob"}, [p, &sink] { sink = p[threadIdx.x]; });
      },
      "heap-buffer-overflow");
}
#endif
#endif

}  // namespace
}  // namespace tessera::cuda_test
