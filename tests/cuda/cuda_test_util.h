// Shared helpers for tests/cuda: device buffers and the skip-without-GPU rule.
// These tests build twice (tests/CMakeLists.txt): against a GPU, where each test
// skips when no device is present, and against the CPU emulator (TESSERA_CUDA_EMU),
// where "device" memory is host memory and the emulator always has one device.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "kernels/cuda/device.cuh"

namespace tessera::cuda_test {

#define TESSERA_REQUIRE_CUDA_DEVICE()                                                   \
  do {                                                                                  \
    if (::tessera::kernels::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// Owns n elements of device memory; aborts the test on allocation failure.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n > 0 && cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)) != cudaSuccess) {
      ADD_FAILURE() << "cudaMalloc of " << n * sizeof(T) << " bytes failed";
      p_ = nullptr;
    }
    if (p_ != nullptr) cudaMemset(p_, 0, n * sizeof(T));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { Upload(host); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; }
  ~DeviceBuffer() {
    if (p_ != nullptr) cudaFree(p_);
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  void Upload(const std::vector<T>& host) {
    ASSERT_EQ(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> Download() const {
    std::vector<T> host(n_);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

inline std::vector<float> RandomNormal(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

inline bool BitwiseEqual(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * 4) == 0; }

}  // namespace tessera::cuda_test
