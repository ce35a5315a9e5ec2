#include "kernels/cuda/dequant.cuh"

#include <cstddef>

#include "common/quant.h"
#include "kernels/cuda/quant_decode.cuh"

namespace tessera::kernels::cuda {
namespace {

using quant::Add;
using quant::E8M0Half;
using quant::HalfAt;
using quant::HighBit;
using quant::Mul;
using quant::Nibble;
using quant::ScaleMin;
using quant::Sub;
using quant::TableValue;
static_assert(offsetof(BlockQ5_K, dmin) == offsetof(BlockQ4_K, dmin) &&
              offsetof(BlockQ5_K, scales) == offsetof(BlockQ4_K, scales));

constexpr int kThreads = 256;
// Elements per thread block (8 per thread): a multiple of every block size, so a
// thread block always covers whole quantized blocks.
constexpr int64_t kChunk = 2048;

// d * sc * q - dmin * m of Q4_K / Q5_K's element i, with q's low 4 bits from qs.
__device__ __forceinline__ float KQuant(const uint8_t* b, const uint8_t* qs, int i, int high) {
  int sc, m;
  const int t = i / 32;
  ScaleMin(b + offsetof(BlockQ4_K, scales), t, &sc, &m);
  const int q = ((qs[32 * (t / 2) + i % 32] >> (4 * (t % 2))) & 0xF) | high << 4;
  const float dl = Mul(HalfAt(b + offsetof(BlockQ4_K, d)), static_cast<float>(sc));
  const float ml = Mul(HalfAt(b + offsetof(BlockQ4_K, dmin)), static_cast<float>(m));
  return Sub(Mul(dl, static_cast<float>(q)), ml);
}

// Element i of the block at b (layouts in common/quant.h), with DequantizeRow's
// operations in its order. The switch is uniform across a launch (one type).
__device__ __forceinline__ float DecodeOne(DType type, const uint8_t* b, int i) {
  switch (type) {
    case DType::kQ8_0:
      return Mul(HalfAt(b), static_cast<float>(static_cast<int8_t>(b[offsetof(BlockQ8_0, qs) + i])));
    case DType::kQ4_0: return Mul(HalfAt(b), static_cast<float>(Nibble(b + offsetof(BlockQ4_0, qs), i) - 8));
    case DType::kQ4_1:
      return Add(Mul(HalfAt(b), static_cast<float>(Nibble(b + offsetof(BlockQ4_1, qs), i))),
                 HalfAt(b + offsetof(BlockQ4_1, m)));
    case DType::kQ5_0: {
      const int q = Nibble(b + offsetof(BlockQ5_0, qs), i) | HighBit(b + offsetof(BlockQ5_0, qh), i) << 4;
      return Mul(HalfAt(b), static_cast<float>(q - 16));
    }
    case DType::kQ5_1: {
      const int q = Nibble(b + offsetof(BlockQ5_1, qs), i) | HighBit(b + offsetof(BlockQ5_1, qh), i) << 4;
      return Add(Mul(HalfAt(b), static_cast<float>(q)), HalfAt(b + offsetof(BlockQ5_1, m)));
    }
    case DType::kQ2_K: {
      const int h = i / 128, s = (i % 128) / 32, l = i % 32;
      const int sc = b[offsetof(BlockQ2_K, scales) + i / 16];
      const float dl = Mul(HalfAt(b + offsetof(BlockQ2_K, d)), static_cast<float>(sc & 0xF));
      const float ml = Mul(HalfAt(b + offsetof(BlockQ2_K, dmin)), static_cast<float>(sc >> 4));
      const int q = (b[offsetof(BlockQ2_K, qs) + 32 * h + l] >> (2 * s)) & 3;
      return Sub(Mul(dl, static_cast<float>(q)), ml);
    }
    case DType::kQ3_K: {
      const int h = i / 128, s = (i % 128) / 32, l = i % 32, j = i / 16;
      const uint8_t* scales = b + offsetof(BlockQ3_K, scales);
      const int lo = (scales[j % 8] >> (4 * (j / 8))) & 0xF, hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
      const float dl = Mul(HalfAt(b + offsetof(BlockQ3_K, d)), static_cast<float>((lo | hi << 4) - 32));
      const int q = (b[offsetof(BlockQ3_K, qs) + 32 * h + l] >> (2 * s)) & 3;
      const int high = (b[offsetof(BlockQ3_K, hmask) + l] >> (4 * h + s)) & 1;
      return Mul(dl, static_cast<float>(q - (high ? 0 : 4)));
    }
    case DType::kQ4_K: return KQuant(b, b + offsetof(BlockQ4_K, qs), i, 0);
    case DType::kQ5_K:
      return KQuant(b, b + offsetof(BlockQ5_K, qs), i, (b[offsetof(BlockQ5_K, qh) + i % 32] >> (i / 32)) & 1);
    case DType::kQ6_K: {
      const int h = i / 128, g = (i % 128) / 32, l = i % 32;
      const uint8_t* ql = b + offsetof(BlockQ6_K, ql) + 64 * h;
      const uint8_t* qh = b + offsetof(BlockQ6_K, qh) + 32 * h;
      const int q = ((ql[l + 32 * (g % 2)] >> (g >= 2 ? 4 : 0)) & 0xF) | ((qh[l] >> (2 * g)) & 3) << 4;
      const int sc = static_cast<int8_t>(b[offsetof(BlockQ6_K, scales) + i / 16]);
      const float dl = Mul(HalfAt(b + offsetof(BlockQ6_K, d)), static_cast<float>(sc));
      return Mul(dl, static_cast<float>(q - 32));
    }
    case DType::kIQ4_NL:
      return Mul(HalfAt(b), TableValue(quant::kIq4Lo, quant::kIq4Hi, Nibble(b + offsetof(BlockIQ4_NL, qs), i)));
    case DType::kIQ4_XS: {
      const int j = i / 32;
      const int scales_h = b[offsetof(BlockIQ4_XS, scales_h)] | b[offsetof(BlockIQ4_XS, scales_h) + 1] << 8;
      const int ls = ((b[offsetof(BlockIQ4_XS, scales_l) + j / 2] >> (4 * (j % 2))) & 0xF) |
                     ((scales_h >> (2 * j)) & 3) << 4;
      const float dl = Mul(HalfAt(b), static_cast<float>(ls - 32));
      return Mul(dl, TableValue(quant::kIq4Lo, quant::kIq4Hi, Nibble(b + offsetof(BlockIQ4_XS, qs) + 16 * j, i % 32)));
    }
    case DType::kMXFP4:
      return Mul(E8M0Half(b[0]), TableValue(quant::kFp4Lo, quant::kFp4Hi, Nibble(b + offsetof(BlockMXFP4, qs), i)));
    default: return 0.0f;  // unreachable: Dequantize admits only the types above
  }
}

__device__ __forceinline__ void Put(float* p, float v) { *p = v; }
// F32ToBf16 of common/dtype.h bit for bit (round to nearest even, NaN kept quiet);
// __float2bfloat16_rn agrees except for NaN payloads.
__device__ __forceinline__ void Put(uint16_t* p, float v) {
  uint32_t bits = __float_as_uint(v);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    *p = static_cast<uint16_t>((bits >> 16) | 0x40);
    return;
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  *p = static_cast<uint16_t>(bits >> 16);
}

// One thread block per kChunk elements (whole quantized blocks, possibly spanning
// rows); consecutive threads take consecutive elements, so the stores coalesce and
// the reads of one quantized block come from the same few cache lines.
template <typename OutT>
__global__ void __launch_bounds__(kThreads)
    DequantizeKernel(const uint8_t* __restrict__ src, DType type, int block_shift, int block_bytes, int64_t elems,
                     OutT* __restrict__ dst) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kChunk;
  const int n = static_cast<int>(elems - begin < kChunk ? elems - begin : kChunk);
  const uint8_t* chunk = src + (begin >> block_shift) * block_bytes;
  for (int e = threadIdx.x; e < n; e += kThreads) {
    const int k = e >> block_shift;
    Put(dst + begin + e, DecodeOne(type, chunk + static_cast<int64_t>(k) * block_bytes, e - (k << block_shift)));
  }
}

bool DeviceDecodes(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
    case DType::kMXFP4: return true;
    default: return false;
  }
}

}  // namespace

cudaError_t Dequantize(const void* src, DType type, int64_t elems, void* dst, ElemType dst_type,
                       cudaStream_t stream) {
  if (!DeviceDecodes(type) || elems < 0 || elems % DTypeBlockElems(type) != 0 ||
      (dst_type != ElemType::kF32 && dst_type != ElemType::kBF16)) {
    return cudaErrorInvalidValue;
  }
  if (elems == 0) return cudaSuccess;
  const int64_t grid = (elems + kChunk - 1) / kChunk;
  if (grid > 0x7fffffff) return cudaErrorInvalidValue;
  const int shift = DTypeBlockElems(type) == 256 ? 8 : 5;
  const int bytes = static_cast<int>(DTypeBlockBytes(type));
  const auto* s = static_cast<const uint8_t*>(src);
  if (dst_type == ElemType::kF32) {
    TESSERA_LAUNCH(static_cast<unsigned>(grid), kThreads, 0, stream, DequantizeKernel<float>)(
        s, type, shift, bytes, elems, static_cast<float*>(dst));
  } else {
    TESSERA_LAUNCH(static_cast<unsigned>(grid), kThreads, 0, stream, DequantizeKernel<uint16_t>)(
        s, type, shift, bytes, elems, static_cast<uint16_t*>(dst));
  }
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
