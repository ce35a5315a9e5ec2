#include "kernels/cuda/kv_write.cuh"

#include <cstring>

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;


// Converts 4 consecutive f32 values into cache type T and stores them at dst
// (aligned to 4 * sizeof(T)) with one store.
template <typename T>
__device__ __forceinline__ void Store4(T* dst, float4 v) {
  T e[4];
  Store(&e[0], v.x);
  Store(&e[1], v.y);
  Store(&e[2], v.z);
  Store(&e[3], v.w);
  if constexpr (sizeof(T) == 4) {
    float4 packed;
    memcpy(&packed, e, sizeof(packed));
    *reinterpret_cast<float4*>(dst) = packed;
  } else {
    uint2 packed;
    memcpy(&packed, e, sizeof(packed));
    *reinterpret_cast<uint2*>(dst) = packed;
  }
}

// One block per token; a skipped token's (slot < 0) block returns at once.
// kVec: rows of 4-element groups (row % 4 == 0, k/v and their strides 16-byte
// aligned, caches aligned to 4 elements); the stored values are the same either way.
template <typename T, bool kVec>
__global__ void WriteKvKernel(const float* __restrict__ k, int64_t k_stride, const float* __restrict__ v,
                              int64_t v_stride, int64_t row, const int64_t* __restrict__ slot_mapping,
                              T* __restrict__ k_cache, T* __restrict__ v_cache) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slot_mapping[t];
  if (slot < 0) return;
  const float* ks = k + t * k_stride;
  const float* vs = v + t * v_stride;
  T* kd = k_cache + slot * row;
  T* vd = v_cache + slot * row;
  if (kVec) {
    for (int64_t c = threadIdx.x; c < row / 4; c += kThreads) {
      Store4(kd + 4 * c, reinterpret_cast<const float4*>(ks)[c]);
      Store4(vd + 4 * c, reinterpret_cast<const float4*>(vs)[c]);
    }
  } else {
    for (int64_t i = threadIdx.x; i < row; i += kThreads) {
      Store(kd + i, ks[i]);
      Store(vd + i, vs[i]);
    }
  }
}

bool AlignedTo(const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

template <typename T>
cudaError_t Launch(const float* k, int64_t k_stride, const float* v, int64_t v_stride, int64_t tokens,
                   int64_t row, const int64_t* slot_mapping, void* k_cache, void* v_cache,
                   cudaStream_t stream) {
  T* kc = static_cast<T*>(k_cache);
  T* vc = static_cast<T*>(v_cache);
  const unsigned grid = static_cast<unsigned>(tokens);
  const bool vec = row % 4 == 0 && k_stride % 4 == 0 && v_stride % 4 == 0 && AlignedTo(k, 16) &&
                   AlignedTo(v, 16) && AlignedTo(k_cache, 4 * sizeof(T)) && AlignedTo(v_cache, 4 * sizeof(T));
  if (vec) {
    TESSERA_LAUNCH(grid, kThreads, 0, stream, WriteKvKernel<T, true>)(k, k_stride, v, v_stride, row,
                                                                       slot_mapping, kc, vc);
  } else {
    TESSERA_LAUNCH(grid, kThreads, 0, stream, WriteKvKernel<T, false>)(k, k_stride, v, v_stride, row,
                                                                        slot_mapping, kc, vc);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t WriteKv(const float* k, int64_t k_stride, const float* v, int64_t v_stride, int64_t tokens,
                    int64_t kv_heads, int64_t head_dim, const int64_t* slot_mapping, void* k_cache,
                    void* v_cache, ElemType cache_type, cudaStream_t stream) {
  const int64_t row = kv_heads * head_dim;
  if (tokens <= 0 || row <= 0) return cudaSuccess;
  switch (cache_type) {
    case ElemType::kF32:
      return Launch<float>(k, k_stride, v, v_stride, tokens, row, slot_mapping, k_cache, v_cache, stream);
    case ElemType::kF16:
      return Launch<__half>(k, k_stride, v, v_stride, tokens, row, slot_mapping, k_cache, v_cache, stream);
    case ElemType::kBF16:
      return Launch<__nv_bfloat16>(k, k_stride, v, v_stride, tokens, row, slot_mapping, k_cache, v_cache,
                                   stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace tessera::kernels::cuda
