// What every kernels/cuda source includes instead of writing CUDA launch syntax,
// so that one source builds two ways:
//  - with nvcc for the GPU (tessera_cuda_kernels), and
//  - with the host C++ compiler against kernels/cuda/emu (TESSERA_CUDA_EMU), a CPU
//    emulator of CUDA's execution model that CI runs the same kernels on.
// Launch:   TESSERA_LAUNCH(grid, block, smem_bytes, stream, Kernel<T, N>)(args...);
// Dynamic shared memory inside a kernel:  TESSERA_DYNAMIC_SMEM(float, buf);
#pragma once

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#if defined(TESSERA_CUDA_EMU)
#define TESSERA_LAUNCH(grid, block, smem, stream, ...) \
  ::tessera::emu::Launcher((grid), (block), (smem), (stream), &__VA_ARGS__, #__VA_ARGS__)
#define TESSERA_DYNAMIC_SMEM(T, name) T* name = reinterpret_cast<T*>(::tessera::emu::DynamicSmem())
#else
#define TESSERA_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<(grid), (block), (smem), (stream)>>>
#define TESSERA_DYNAMIC_SMEM(T, name)                            \
  extern __shared__ __align__(16) unsigned char tessera_smem_[]; \
  T* name = reinterpret_cast<T*>(tessera_smem_)
#endif
