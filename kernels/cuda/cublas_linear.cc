#include "kernels/cuda/cublas_linear.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/cublas_loader.h"

#include <cublas_v2.h>

namespace tessera::kernels::cuda {
namespace {

std::string Shape(int64_t m, int64_t k, int64_t n) {
  return "[" + std::to_string(m) + "x" + std::to_string(k) + "] @ [" + std::to_string(n) + "x" +
         std::to_string(k) + "]^T";
}

Status CudaFail(const char* what, cudaError_t e) {
  return Internal(std::string("cublas linear: ") + what + ": " + cudaGetErrorString(e));
}

}  // namespace

namespace {
constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // cuBLAS' recommendation for Hopper

Status BlasFail(const char* what, cublasStatus_t s, const std::string& detail = "") {
  return Internal(std::string("cublas linear: ") + what + " failed (" + cublasGetStatusString(s) + ")" +
                  (detail.empty() ? "" : " for " + detail));
}
}  // namespace

StatusOr<std::unique_ptr<CublasLinear>> CublasLinear::Create(cudaStream_t stream) {
  auto b = std::unique_ptr<CublasLinear>(new CublasLinear());
  b->stream_ = stream;
  cublasHandle_t h = nullptr;
  if (cublasStatus_t s = cublasCreate(&h); s != CUBLAS_STATUS_SUCCESS) {
    const char* load = CublasLoadError();  // not linked: opened on first use (cublas_loader.h)
    return load != nullptr ? Internal(std::string("cublas linear: ") + load) : BlasFail("cublasCreate", s);
  }
  b->handle_ = h;
  if (cublasStatus_t s = cublasSetStream(h, stream); s != CUBLAS_STATUS_SUCCESS) {
    return BlasFail("cublasSetStream", s);
  }
  // No TF32: f32 weights must agree with the CPU backend.
  if (cublasStatus_t s = cublasSetMathMode(h, CUBLAS_DEFAULT_MATH); s != CUBLAS_STATUS_SUCCESS) {
    return BlasFail("cublasSetMathMode", s);
  }
  // A fixed workspace: cuBLAS then never allocates, which graph capture needs.
  if (cudaError_t e = cudaMalloc(&b->workspace_, kWorkspaceBytes); e != cudaSuccess) {
    return CudaFail("workspace cudaMalloc", e);
  }
  if (cublasStatus_t s = cublasSetWorkspace(h, b->workspace_, kWorkspaceBytes); s != CUBLAS_STATUS_SUCCESS) {
    return BlasFail("cublasSetWorkspace", s);
  }
  return b;
}

CublasLinear::~CublasLinear() {
  if (handle_ != nullptr) cublasDestroy(handle_);
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (scratch_ != nullptr) cudaFree(scratch_);
  for (void* p : retired_) cudaFree(p);
}

Status CublasLinear::Reserve(int64_t elems) {
  if (elems <= scratch_elems_) return Status::Ok();
  // Old scratch stays allocated: a captured graph may still use its address.
  const int64_t size = std::max(elems, 2 * scratch_elems_);
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, static_cast<size_t>(size) * 2); e != cudaSuccess) {
    return CudaFail(("scratch of " + std::to_string(size * 2) + " bytes").c_str(), e);
  }
  if (scratch_ != nullptr) retired_.push_back(scratch_);
  scratch_ = p;
  scratch_elems_ = size;
  return Status::Ok();
}

Status CublasLinear::Linear(const float* x, int64_t m, int64_t k, const void* w, ElemType w_type, int64_t n,
                            const float* bias, float* y, int64_t ldy) {
  if (m <= 0 || n <= 0) return Status::Ok();
  if (k <= 0 || ldy < n) return InvalidArgument("cublas linear: bad shape " + Shape(m, k, n));
  const float alpha = 1.0f, beta = 0.0f;
  // Column-major view: y^T [n, m] = w [k, n]^T . x^T [k, m].
  const void* b = x;
  cudaDataType_t ab_type = CUDA_R_32F;
  if (w_type != ElemType::kF32) {
    RETURN_IF_ERROR(Reserve(m * k));
    ab_type = w_type == ElemType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
    if (cudaError_t e = ConvertFromF32(x, k, m, k, scratch_, w_type, k, stream_); e != cudaSuccess) {
      return CudaFail(("ConvertFromF32 " + Shape(m, k, n)).c_str(), e);
    }
    b = scratch_;
  }
  const cublasStatus_t s =
      cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                   &alpha, w, ab_type, static_cast<int>(k), b, ab_type, static_cast<int>(k), &beta, y, CUDA_R_32F,
                   static_cast<int>(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) return BlasFail("cublasGemmEx", s, Shape(m, k, n));
  if (bias != nullptr) {
    if (cudaError_t e = AddBias(y, ldy, m, n, bias, stream_); e != cudaSuccess) {
      return CudaFail(("AddBias " + Shape(m, k, n)).c_str(), e);
    }
  }
  return Status::Ok();
}

}  // namespace tessera::kernels::cuda
