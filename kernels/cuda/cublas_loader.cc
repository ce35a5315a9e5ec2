// The cuBLAS entry points Tessera calls, resolved from libcublas with dlopen the first time
// one of them runs.
//
// Why: linked normally, libcublas and libcublasLt run their static initialisers in every
// process of a CUDA build, GPU or not: ~0.25 s and ~170 MB of resident memory before main()
// (measured on `tessera --version`), paid by the CPU server and by every test process, and
// the library had to be installed to run on CPU at all.
//
// These definitions have the C names cublas_v2.h maps its calls to (cublasCreate ->
// cublasCreate_v2, ...), so callers include cublas_v2.h and call cuBLAS as usual; the linker
// binds them here. The library is opened with RTLD_LOCAL and each symbol is looked up in it
// by handle, so these definitions never resolve to themselves. Loading happens once, under
// a function-local static (thread-safe). A library that is missing makes cublasCreate return
// CUBLAS_STATUS_NOT_INITIALIZED and CublasLoadError() say why.
//
// The emulator build (TESSERA_CUDA_EMU) links its own reference cuBLAS: nothing to load.
#include "kernels/cuda/cublas_loader.h"

#if defined(TESSERA_CUDA_EMU)

namespace tessera::kernels::cuda {
const char* CublasLoadError() { return nullptr; }
}  // namespace tessera::kernels::cuda

#else

#include <dlfcn.h>

#include <cublas_v2.h>

#include <string>

#define TESSERA_STR2(x) #x
#define TESSERA_STR(x) TESSERA_STR2(x)

namespace tessera::kernels::cuda {
namespace {

struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  // cublas_api.h overloads cublasGemmEx for C++ callers: name the C entry point's type.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  std::string error;  // empty when every symbol resolved
};

template <typename Fn>
void Resolve(void* lib, const char* name, Fn* fn, std::string* error) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*fn == nullptr && error->empty()) error->assign(std::string("cuBLAS has no symbol ") + name);
}

const CublasApi& Api() {
  static const CublasApi api = [] {
    CublasApi a;
    // The soname of the toolkit we compiled against; its directory as a fallback for machines
    // whose loader path does not list it (the toolkit's lib dir is not in ld.so.conf here).
    const std::string soname = "libcublas.so." TESSERA_STR(CUBLAS_VER_MAJOR);
    void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
#ifdef TESSERA_CUBLAS_DIR
    if (lib == nullptr) lib = dlopen((std::string(TESSERA_CUBLAS_DIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
    if (lib == nullptr) {
      const char* e = dlerror();
      a.error = "cannot load " + soname + ": " + (e != nullptr ? e : "unknown error");
      return a;
    }
    Resolve(lib, "cublasCreate_v2", &a.create, &a.error);
    Resolve(lib, "cublasDestroy_v2", &a.destroy, &a.error);
    Resolve(lib, "cublasSetStream_v2", &a.set_stream, &a.error);
    Resolve(lib, "cublasSetWorkspace_v2", &a.set_workspace, &a.error);
    Resolve(lib, "cublasSetMathMode", &a.set_math_mode, &a.error);
    Resolve(lib, "cublasGetStatusString", &a.status_string, &a.error);
    Resolve(lib, "cublasGemmEx", &a.gemm_ex, &a.error);
    return a;
  }();
  return api;
}

// Every entry point but cublasCreate is only reachable with a handle cublasCreate made, so
// the library is loaded and complete by then; the checks keep a misuse from jumping to null.
bool Ready() { return Api().error.empty(); }

}  // namespace

const char* CublasLoadError() {
  const CublasApi& a = Api();
  return a.error.empty() ? nullptr : a.error.c_str();
}

}  // namespace tessera::kernels::cuda

using tessera::kernels::cuda::Api;
using tessera::kernels::cuda::Ready;

extern "C" {

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  return Ready() ? Api().create(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  return Ready() ? Api().destroy(handle) : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  return Ready() ? Api().set_stream(handle, stream) : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t bytes) {
  return Ready() ? Api().set_workspace(handle, workspace, bytes) : CUBLAS_STATUS_NOT_INITIALIZED;
}
cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  return Ready() ? Api().set_math_mode(handle, mode) : CUBLAS_STATUS_NOT_INITIALIZED;
}
const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  return Ready() ? Api().status_string(status) : "cuBLAS not loaded";
}
cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, const void* B, cudaDataType Btype, int ldb, const void* beta, void* C,
                                         cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                         cublasGemmAlgo_t algo) {
  if (!Ready()) return CUBLAS_STATUS_NOT_INITIALIZED;
  return Api().gemm_ex(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
                       computeType, algo);
}

}  // extern "C"

#endif  // !TESSERA_CUDA_EMU
