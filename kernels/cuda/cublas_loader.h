// cuBLAS is opened with dlopen on first use, not linked (kernels/cuda/cublas_loader.cc):
// a process that never creates a cuBLAS handle (the CPU backend, every CPU test) neither
// needs the library installed nor runs its initialisers at start.
#pragma once

namespace tessera::kernels::cuda {

// Why cuBLAS could not be loaded (the dlopen/dlsym message), or nullptr when it loaded or
// was never asked for. Thread-safe.
const char* CublasLoadError();

}  // namespace tessera::kernels::cuda
