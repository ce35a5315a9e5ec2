#include "kernels/cuda/embedding.cuh"

#include <cstring>

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) { return __bfloat162float(v); }

// One block per token; a pure copy (with exact widening), so vector width does
// not change any value. kVec: 16-byte loads of 16 / sizeof(T) elements (dim and
// both base pointers allow it, checked by the wrapper).
template <typename T, bool kVec>
__global__ void EmbeddingKernel(const T* __restrict__ table, int64_t dim, const int32_t* __restrict__ ids,
                                float* __restrict__ out) {
  const int64_t t = blockIdx.x;
  const T* src = table + static_cast<int64_t>(ids[t]) * dim;
  float* dst = out + t * dim;
  if (kVec) {
    constexpr int kPer = 16 / sizeof(T);
    const int64_t vecs = dim / kPer;
    for (int64_t c = threadIdx.x; c < vecs; c += kThreads) {
      const uint4 raw = reinterpret_cast<const uint4*>(src)[c];
      T e[kPer];
      memcpy(e, &raw, sizeof(raw));
      float4* d = reinterpret_cast<float4*>(dst + c * kPer);
      for (int j = 0; j < kPer / 4; ++j) {
        d[j] = make_float4(ToF32(e[4 * j]), ToF32(e[4 * j + 1]), ToF32(e[4 * j + 2]), ToF32(e[4 * j + 3]));
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < dim; i += kThreads) dst[i] = ToF32(src[i]);
  }
}

template <typename T>
cudaError_t Launch(const void* table, int64_t dim, const int32_t* ids, int64_t n, float* out,
                   cudaStream_t stream) {
  const T* tab = static_cast<const T*>(table);
  const unsigned grid = static_cast<unsigned>(n);
  const bool vec = dim % (16 / sizeof(T)) == 0 && reinterpret_cast<uintptr_t>(table) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % 16 == 0;
  if (vec) {
    TESSERA_LAUNCH(grid, kThreads, 0, stream, EmbeddingKernel<T, true>)(tab, dim, ids, out);
  } else {
    TESSERA_LAUNCH(grid, kThreads, 0, stream, EmbeddingKernel<T, false>)(tab, dim, ids, out);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t Embedding(const void* table, ElemType type, int64_t dim, const int32_t* ids, int64_t n,
                      float* out, cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return cudaSuccess;
  switch (type) {
    case ElemType::kF32: return Launch<float>(table, dim, ids, n, out, stream);
    case ElemType::kF16: return Launch<__half>(table, dim, ids, n, out, stream);
    case ElemType::kBF16: return Launch<__nv_bfloat16>(table, dim, ids, n, out, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tessera::kernels::cuda
