#include "kernels/cuda/device.cuh"

#include <cstdio>

#include "kernels/cuda/compat.cuh"

namespace tessera::kernels::cuda {

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

std::string DeviceDescription(int device) {
  cudaDeviceProp p{};
  if (device < 0 || device >= DeviceCount() || cudaGetDeviceProperties(&p, device) != cudaSuccess) return "";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %d SMs, %.1f GiB)", p.name, p.major, p.minor,
                p.multiProcessorCount, static_cast<double>(p.totalGlobalMem) / (1 << 30));
  return buf;
}

}  // namespace tessera::kernels::cuda
