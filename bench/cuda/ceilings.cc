// Ceilings (D2D copy, cuBLAS GEMM) and the Linear comparison, both through cuBLAS.
#include <cublas_v2.h>

#include <algorithm>
#include <memory>
#include <string>

#include "bench/cuda/sections.h"
#include "kernels/cuda/cublas_linear.h"
#include "kernels/cuda/linear_tiled.cuh"

namespace tessera::cuda_bench {
namespace {

constexpr int64_t kCublasWorkspace = int64_t{32} << 20;  // NVIDIA's recommendation for Hopper

std::string Shape3(int64_t m, int64_t n, int64_t k) {
  return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k);
}

// One handle bound to the bench stream, with an explicit workspace (so that graph
// capture never makes cuBLAS allocate).
class Cublas {
 public:
  ~Cublas() {
    if (h_) cublasDestroy(h_);
  }
  Status Init(cudaStream_t s) {
    if (cublasCreate(&h_) != CUBLAS_STATUS_SUCCESS) return Internal("cublasCreate failed");
    ASSIGN_OR_RETURN(ws_, DeviceMem::Alloc(kCublasWorkspace));
    if (cublasSetStream(h_, s) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(h_, ws_.get(), kCublasWorkspace) != CUBLAS_STATUS_SUCCESS) {
      return Internal("cublasSetStream/cublasSetWorkspace failed");
    }
    return Status::Ok();
  }
  // Row-major y[m, n] = x[m, k] . w[n, k]^T (column-major: y^T = w^T' x^T).
  cudaError_t Gemm(const void* x, const void* w, cudaDataType ab_type, void* y, cudaDataType c_type,
                   cublasComputeType_t compute, int64_t m, int64_t n, int64_t k) const {
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t st = cublasGemmEx(h_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
                                           static_cast<int>(k), &alpha, w, ab_type, static_cast<int>(k), x, ab_type,
                                           static_cast<int>(k), &beta, y, c_type, static_cast<int>(n), compute,
                                           CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
  }

 private:
  cublasHandle_t h_ = nullptr;
  DeviceMem ws_;
};

Status Flush(Context& ctx) { return ctx.report->WriteJson(ctx.json_path); }

// The Linear implementations compared: the raw GEMM, the backend's cuBLAS path,
// the deterministic mode's kernel.
enum class Impl { kGemm, kBackend, kTiled };
const char* ImplName(Impl i) {
  return i == Impl::kGemm ? "cuBLAS GEMM" : i == Impl::kBackend ? "CublasLinear" : "LinearTiled";
}

// Square GEMM ceiling: A, B random (never zeros), C of c_type.
StatusOr<Row> GemmCeiling(Context& ctx, const Cublas& blas, int64_t s, cudaDataType ab, ElemType ab_elem,
                          cudaDataType c, int64_t c_size, cublasComputeType_t compute, const std::string& name) {
  Row row{"ceiling", name, Shape3(s, s, s)};
  const int64_t es = kernels::cuda::ElemSize(ab_elem);
  ASSIGN_OR_RETURN(DeviceMem a, DeviceMem::Alloc(s * s * es));
  ASSIGN_OR_RETURN(DeviceMem b, DeviceMem::Alloc(s * s * es));
  ASSIGN_OR_RETURN(DeviceMem y, DeviceMem::Alloc(s * s * c_size));
  RETURN_IF_ERROR(FillRandom(a.get(), s * s, ab_elem, 1));
  RETURN_IF_ERROR(FillRandom(b.get(), s * s, ab_elem, 2));
  TimeOptions to;
  to.target_ms = 20;
  to.max_repeats = 10;
  ASSIGN_OR_RETURN(row.t, TimeOp(ctx.stream, 1, [&](int, cudaStream_t) {
                     return blas.Gemm(a.get(), b.get(), ab, y.get(), c, compute, s, s, s);
                   }, to));
  row.flops = 2.0 * s * s * s;
  return row;
}

}  // namespace

Status RunCeilings(Context& ctx) {
  // D2D copy: >= 1 GiB each way where memory allows, bytes read + written.
  const int64_t free_b = FreeDeviceBytes();
  const int64_t copy_bytes = std::min<int64_t>(ctx.dims.copy_bytes, (free_b / 4) & ~int64_t{4095});
  double copy_bw = 0;
  {
    Row row{"ceiling", "D2D cudaMemcpyAsync", "2 x " + std::to_string(copy_bytes >> 20) + " MiB"};
    ASSIGN_OR_RETURN(DeviceMem src, DeviceMem::Alloc(copy_bytes));
    ASSIGN_OR_RETURN(DeviceMem dst, DeviceMem::Alloc(copy_bytes));
    RETURN_IF_ERROR(FillRandom(src.get(), copy_bytes / 4, ElemType::kF32, 3));
    TimeOptions to;
    to.target_ms = 5;
    to.max_repeats = 15;
    ASSIGN_OR_RETURN(row.t, TimeOp(ctx.stream, 1, [&](int, cudaStream_t s) {
                       return cudaMemcpyAsync(dst.get(), src.get(), static_cast<size_t>(copy_bytes),
                                              cudaMemcpyDeviceToDevice, s);
                     }, to));
    row.bytes = 2.0 * static_cast<double>(copy_bytes);
    copy_bw = row.bytes / (row.t.median_us * 1e-6);
    ctx.report->Add(row);
  }

  Cublas blas;
  RETURN_IF_ERROR(blas.Init(ctx.stream));
  const int64_t s = ctx.dims.gemm;
  double bf16_peak = 0, f32_peak = 0;
  auto bf16 = GemmCeiling(ctx, blas, s, CUDA_R_16BF, ElemType::kBF16, CUDA_R_16BF, 2, CUBLAS_COMPUTE_32F,
                          "cuBLAS bf16 GEMM (bf16 out)");
  if (bf16.ok()) {
    bf16_peak = bf16->flops / (bf16->t.median_us * 1e-6);
    ctx.report->Add(*bf16);
  } else {
    Row r("ceiling", "cuBLAS bf16 GEMM", Shape3(s, s, s));
    r.error = bf16.status().ToString();
    ctx.report->Add(r);
  }
  // f32 without TF32 (the default math mode): the CUDA-core ceiling that
  // LinearTiled and the attention kernels (no tensor cores) are stated against.
  auto f32 = GemmCeiling(ctx, blas, s, CUDA_R_32F, ElemType::kF32, CUDA_R_32F, 4, CUBLAS_COMPUTE_32F,
                         "cuBLAS f32 GEMM (no TF32)");
  if (f32.ok()) {
    f32_peak = f32->flops / (f32->t.median_us * 1e-6);
    ctx.report->Add(*f32);
  } else {
    Row r("ceiling", "cuBLAS f32 GEMM", Shape3(s, s, s));
    r.error = f32.status().ToString();
    ctx.report->Add(r);
  }
  ctx.report->SetCeilings(copy_bw, bf16_peak, f32_peak);
  return Flush(ctx);
}

Status RunLinear(Context& ctx) {
  Cublas blas;
  RETURN_IF_ERROR(blas.Init(ctx.stream));
  for (const Dims::Linear& sh : ctx.dims.linears) {
    for (int64_t m : ctx.dims.linear_ms) {
      for (const Impl impl : {Impl::kGemm, Impl::kBackend, Impl::kTiled}) {
        Row row{"linear", std::string(ImplName(impl)) + " " + sh.name, Shape3(m, sh.n, sh.k)};
        if (ctx.OutOfTime()) {
          row.error = "skipped: time budget";
          ctx.report->Add(row);
          continue;
        }
        const int64_t w_bytes = sh.n * sh.k * 2, x_bytes = m * sh.k * 4, xb_bytes = m * sh.k * 2,
                      y_bytes = m * sh.n * 4;
        auto measure = [&]() -> StatusOr<Timing> {
          const int sets = RotatingSets(w_bytes + x_bytes + xb_bytes + y_bytes, ctx.l2_bytes);
          std::vector<DeviceMem> w, x, xb, y;
          for (int i = 0; i < sets; ++i) {
            ASSIGN_OR_RETURN(DeviceMem a, DeviceMem::Alloc(w_bytes));
            ASSIGN_OR_RETURN(DeviceMem b, DeviceMem::Alloc(x_bytes));
            ASSIGN_OR_RETURN(DeviceMem c, DeviceMem::Alloc(xb_bytes));
            ASSIGN_OR_RETURN(DeviceMem d, DeviceMem::Alloc(y_bytes));
            RETURN_IF_ERROR(FillRandom(a.get(), sh.n * sh.k, ElemType::kBF16, 10 + i, 0.02f));
            RETURN_IF_ERROR(FillRandom(b.get(), m * sh.k, ElemType::kF32, 20 + i));
            RETURN_IF_ERROR(FillRandom(c.get(), m * sh.k, ElemType::kBF16, 20 + i));
            w.push_back(std::move(a)), x.push_back(std::move(b)), xb.push_back(std::move(c)), y.push_back(std::move(d));
          }
          std::unique_ptr<kernels::cuda::CublasLinear> backend_linear;
          if (impl == Impl::kBackend) {
            ASSIGN_OR_RETURN(backend_linear, kernels::cuda::CublasLinear::Create(ctx.stream));
            RETURN_IF_ERROR(backend_linear->Reserve(m * sh.k));
          }
          TimeOptions to;
          to.min_repeats = 3;
          to.budget_ms = 200;
          return TimeOp(ctx.stream, sets, [&](int v, cudaStream_t s) -> cudaError_t {
                switch (impl) {
                  case Impl::kTiled:
                    return kernels::cuda::LinearTiled(x[v].as<float>(), m, sh.k, w[v].get(), ElemType::kBF16, sh.n,
                                                      nullptr, y[v].as<float>(), sh.n, s);
                  case Impl::kBackend:
                    return backend_linear->Linear(x[v].as<float>(), m, sh.k, w[v].get(), ElemType::kBF16, sh.n,
                                                  nullptr, y[v].as<float>(), sh.n).ok()
                               ? cudaSuccess
                               : cudaErrorUnknown;
                  default:
                    return blas.Gemm(xb[v].get(), w[v].get(), CUDA_R_16BF, y[v].get(), CUDA_R_32F,
                                     CUBLAS_COMPUTE_32F, m, sh.n, sh.k);
                }
              }, to);
        };
        row.bytes = static_cast<double>(w_bytes + (impl == Impl::kGemm ? xb_bytes : x_bytes) + y_bytes);
        row.flops = 2.0 * m * sh.n * sh.k;
        RETURN_IF_ERROR(AddTimed(ctx, row, measure()));
      }
    }
    RETURN_IF_ERROR(Flush(ctx));
  }
  ctx.report->AddNote("linear: 'cuBLAS GEMM' times cublasGemmEx alone (x already bf16, f32 out, COMPUTE_32F); "
                      "'CublasLinear' is the backend's Linear (x f32 -> bf16 conversion + that GEMM); "
                      "'LinearTiled' the deterministic mode's kernel (x f32, w bf16). Bytes: w + x + y once each.");
  return Flush(ctx);
}

}  // namespace tessera::cuda_bench
