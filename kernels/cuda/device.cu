#include <cuda_runtime.h>

#include "kernels/cuda/device.cuh"

namespace tessera::kernels::cuda {

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

}  // namespace tessera::kernels::cuda
