// CUDA device discovery. Host-callable, safe on machines without a GPU or driver.
#pragma once

#include <string>

namespace tessera::kernels::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no GPU.
int DeviceCount();

// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)" for device `device`, or "" when absent.
std::string DeviceDescription(int device);

}  // namespace tessera::kernels::cuda
