// cuBLAS GEMMs for Backend::Linear: y[m, n] (row stride ldy) = x[m, k] @ w[n, k]^T + bias.
// bf16/f16 weights: x is converted to the weight type in a scratch buffer and
// multiplied with f32 accumulation and f32 output (cublasGemmEx, COMPUTE_32F);
// f32 weights: plain f32 GEMM with CUBLAS_DEFAULT_MATH (no TF32), so results agree
// with the CPU to f32 rounding. cuBLAS picks algorithms by shape, so results are
// not batch-invariant (the deterministic mode uses LinearTiled instead).
// Under the CPU emulator cuBLAS is a reference loop (emu/include/cublas_v2.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "kernels/cuda/types.cuh"

struct cublasContext;  // cublasHandle_t is cublasContext*

namespace tessera::kernels::cuda {

// Owns a cuBLAS handle, its workspace and the conversion scratch, bound to one
// stream. Not thread-safe; all calls are asynchronous on the stream except when
// the scratch grows (cudaMalloc: never inside a graph capture; run the shape once first).
class CublasLinear {
 public:
  static StatusOr<std::unique_ptr<CublasLinear>> Create(cudaStream_t stream);
  ~CublasLinear();
  CublasLinear(const CublasLinear&) = delete;
  CublasLinear& operator=(const CublasLinear&) = delete;

  // Grows the conversion scratch to hold `elems` 16-bit elements.
  Status Reserve(int64_t elems);
  Status Linear(const float* x, int64_t m, int64_t k, const void* w, ElemType w_type, int64_t n,
                const float* bias, float* y, int64_t ldy);

 private:
  CublasLinear() = default;
  cudaStream_t stream_ = nullptr;
  cublasContext* handle_ = nullptr;
  void* workspace_ = nullptr;
  void* scratch_ = nullptr;
  int64_t scratch_elems_ = 0;
  std::vector<void*> retired_;  // outgrown scratch, freed with the object (graphs may hold it)
};

}  // namespace tessera::kernels::cuda
