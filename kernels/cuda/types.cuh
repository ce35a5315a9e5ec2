// Element types the CUDA kernels read (weights, KV cache) and conversions to f32.
#pragma once

#include <cstdint>

#include "kernels/cuda/compat.cuh"

namespace tessera::kernels::cuda {

enum class ElemType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

__host__ __device__ inline int64_t ElemSize(ElemType t) { return t == ElemType::kF32 ? 4 : 2; }

// Element i of an array of type t, as f32 (exact for every type).
__device__ __forceinline__ float LoadAsF32(const void* p, ElemType t, int64_t i) {
  switch (t) {
    case ElemType::kF32: return static_cast<const float*>(p)[i];
    case ElemType::kF16: return __half2float(static_cast<const __half*>(p)[i]);
    default: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  }
}

// Stores v (f32) as type t, rounding to nearest even.
__device__ __forceinline__ void StoreFromF32(void* p, ElemType t, int64_t i, float v) {
  switch (t) {
    case ElemType::kF32: static_cast<float*>(p)[i] = v; break;
    case ElemType::kF16: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    default: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
  }
}

// Typed store of an f32 value (round to nearest even), for kernels templated on T.
__device__ __forceinline__ void Store(float* p, float v) { *p = v; }
__device__ __forceinline__ void Store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ void Store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

}  // namespace tessera::kernels::cuda
