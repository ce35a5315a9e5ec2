// cuBLAS stand-in of the CUDA emulator (see include/cublas_v2.h).
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

float Load(const void* p, cudaDataType_t t, int64_t i) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(p)[i];
    case CUDA_R_16F: return static_cast<float>(static_cast<const __half*>(p)[i]);
    default: return static_cast<float>(static_cast<const __nv_bfloat16*>(p)[i]);
  }
}
void Store(void* p, cudaDataType_t t, int64_t i, float v) {
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(p)[i] = v; break;
    case CUDA_R_16F: static_cast<__half*>(p)[i] = __half(v); break;
    default: static_cast<__nv_bfloat16*>(p)[i] = __nv_bfloat16(v); break;
  }
}
bool KnownType(cudaDataType_t t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF; }

cublasStatus_t Invalid(const std::string& why) {
  std::fprintf(stderr, "cuda emulator: cublasGemmEx: %s\n", why.c_str());
  return CUBLAS_STATUS_INVALID_VALUE;
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (bytes > 0 && !tessera::emu::IsDeviceRange(workspace, bytes)) return Invalid("workspace is not device memory");
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_EXECUTION_FAILED";
  }
}
const char* cublasGetStatusString(cublasStatus_t s) { return cublasGetStatusName(s); }

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType_t at, int lda, const void* B,
                            cudaDataType_t bt, int ldb, const void* beta, void* C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (h == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (m < 0 || n < 0 || k < 0) return Invalid("negative dimension");
  if (!KnownType(at) || !KnownType(bt) || !KnownType(ct)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (at != bt) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_PEDANTIC &&
      compute != CUBLAS_COMPUTE_32F_FAST_TF32 && compute != CUBLAS_COMPUTE_32F_FAST_16BF &&
      compute != CUBLAS_COMPUTE_32F_FAST_16F) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const int a_rows = ta == CUBLAS_OP_N ? m : k, b_rows = tb == CUBLAS_OP_N ? k : n;
  if (lda < std::max(1, a_rows)) return Invalid("lda " + std::to_string(lda) + " < " + std::to_string(a_rows));
  if (ldb < std::max(1, b_rows)) return Invalid("ldb " + std::to_string(ldb) + " < " + std::to_string(b_rows));
  if (ldc < std::max(1, m)) return Invalid("ldc " + std::to_string(ldc) + " < " + std::to_string(m));
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  // cuBLAS takes alpha/beta as float for 32F compute, read at call time (host pointer mode).
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const auto ops = [=]() {
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (int p = 0; p < k; ++p) {
          const int64_t ai = ta == CUBLAS_OP_N ? int64_t{i} + int64_t{p} * lda : int64_t{p} + int64_t{i} * lda;
          const int64_t bi = tb == CUBLAS_OP_N ? int64_t{p} + int64_t{j} * ldb : int64_t{j} + int64_t{p} * ldb;
          acc = std::fma(Load(A, at, ai), Load(B, bt, bi), acc);
        }
        const int64_t ci = int64_t{i} + int64_t{j} * ldc;
        Store(C, ct, ci, b == 0.0f ? a * acc : a * acc + b * Load(C, ct, ci));
      }
    }
  };
  return tessera::emu::EnqueueOnStream(h->stream, ops, "cublasGemmEx") == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                                                                      : CUBLAS_STATUS_EXECUTION_FAILED;
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc) {
  return cublasGemmEx(h, ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb, beta, C, CUDA_R_32F, ldc,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
