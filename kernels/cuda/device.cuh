// CUDA device discovery. Host-callable, safe on machines without a GPU or driver.
#pragma once

namespace tessera::kernels::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no GPU.
int DeviceCount();

}  // namespace tessera::kernels::cuda
