// Device scratch that only grows, for the CUDA backend's workspaces.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

namespace tessera {

// A device buffer that only grows (at least 2x). Old buffers are kept until the
// owner is destroyed: a captured graph may still hold their address, and a
// queued launch may still read them. Growing calls cudaMalloc, so it must not
// happen during graph capture (callers check). Not thread-safe.
struct GrowBuffer {
  void* p = nullptr;
  int64_t bytes = 0;
  std::vector<void*> retired;
  GrowBuffer() = default;
  GrowBuffer(const GrowBuffer&) = delete;
  GrowBuffer& operator=(const GrowBuffer&) = delete;
  ~GrowBuffer() {
    for (void* q : retired) cudaFree(q);
    if (p != nullptr) cudaFree(p);
  }
  cudaError_t Ensure(int64_t want) {
    if (want <= bytes) return cudaSuccess;
    const int64_t size = std::max<int64_t>({want, 2 * bytes, 4096});
    void* q = nullptr;
    const cudaError_t e = cudaMalloc(&q, static_cast<size_t>(size));
    if (e != cudaSuccess) return e;
    if (p != nullptr) retired.push_back(p);
    p = q;
    bytes = size;
    return cudaSuccess;
  }
};

}  // namespace tessera
