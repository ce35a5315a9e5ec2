// kernels/cuda Dequantize against the host's DequantizeRow (common/quant.cc) for every
// GGUF block type: random valid blocks and blocks at the extremes of every field give
// bitwise the same f32 values, and bf16 values equal to F32ToBf16 of them. Then the
// CUDA backend's upload of a quantized weight (dequantized on the device) against the
// same weight dequantized on the host and uploaded as bf16: the same bytes on the
// device and the same Linear output.
#include <cstddef>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "common/quant.h"
#include "engine/backend.h"
#include "engine/cuda/cuda_backend.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/linear_tiled.cuh"
#include "kernels/cuda/quant_gemv.cuh"
#include "tests/cuda/cuda_test_util.h"

namespace tessera {
namespace {

using cuda_test::DeviceBuffer;
using kernels::cuda::ElemType;

constexpr DType kTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,   DType::kQ8_0,
                            DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,   DType::kQ6_K,
                            DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4};

// Byte offsets of a block's f16 fields (finite in a valid block; every other byte may
// hold anything). MXFP4 has none: its u8 exponent is valid whatever it holds.
std::vector<size_t> HalfFields(DType t) {
  switch (t) {
    case DType::kQ8_0: return {offsetof(BlockQ8_0, d)};
    case DType::kQ4_0: return {offsetof(BlockQ4_0, d)};
    case DType::kQ4_1: return {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)};
    case DType::kQ5_0: return {offsetof(BlockQ5_0, d)};
    case DType::kQ5_1: return {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)};
    case DType::kQ2_K: return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
    case DType::kQ3_K: return {offsetof(BlockQ3_K, d)};
    case DType::kQ4_K: return {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)};
    case DType::kQ5_K: return {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)};
    case DType::kQ6_K: return {offsetof(BlockQ6_K, d)};
    case DType::kIQ4_NL: return {offsetof(BlockIQ4_NL, d)};
    case DType::kIQ4_XS: return {offsetof(BlockIQ4_XS, d)};
    default: return {};
  }
}

// `blocks` blocks of type t. Random: uniform bytes, finite f16 fields (`scale` > 0:
// f16 fields of magnitude <= scale, MXFP4 exponents near 2^0, for sensible Linear
// outputs). The first 16 blocks (when scale == 0) are extremes: all other bytes 0x00
// (blocks 0-7) or 0xFF (8-15, every 6-bit scale/min 63, every quant at its maximum),
// f16 fields at +-max, +-smallest subnormal, largest subnormal, smallest normal, +-0;
// MXFP4 exponents 0, 1, 2 (subnormal scales), 127, 128, 253, 254, 255.
std::vector<uint8_t> RandomBlocks(DType t, int64_t blocks, uint32_t seed, float scale = 0.0f) {
  static constexpr uint16_t kHalves[8] = {0x7bff, 0xfbff, 0x0001, 0x8001, 0x03ff, 0x0400, 0x0000, 0x8000};
  static constexpr uint8_t kExponents[8] = {0, 1, 2, 127, 128, 253, 254, 255};
  const int64_t bytes = DTypeBlockBytes(t);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<uint8_t> out(static_cast<size_t>(blocks * bytes));
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  for (int64_t k = 0; k < blocks; ++k) {
    uint8_t* blk = out.data() + k * bytes;
    const bool extreme = scale == 0.0f && k < 16;
    if (extreme) std::memset(blk, k < 8 ? 0x00 : 0xFF, static_cast<size_t>(bytes));
    if (t == DType::kMXFP4) {
      if (extreme) blk[0] = kExponents[k % 8];
      if (scale > 0.0f) blk[0] = static_cast<uint8_t>(120 + rng() % 8);
    }
    for (size_t off : HalfFields(t)) {
      uint16_t h = static_cast<uint16_t>(rng());
      if (((h >> 10) & 0x1f) == 0x1f) h ^= 0x4000;  // no inf/NaN
      if (extreme) h = kHalves[k % 8];
      if (scale > 0.0f) h = F32ToF16(scale * unit(rng));
      std::memcpy(blk + off, &h, 2);
    }
  }
  return out;
}

std::string FirstDifference(const std::vector<float>& want, const std::vector<uint32_t>& got_bits, DType t) {
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t w;
    std::memcpy(&w, &want[i], 4);
    if (w != got_bits[i]) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "%s element %zu (block %zu): host %a (0x%08x), device 0x%08x",
                    std::string(DTypeName(t)).c_str(), i, i / DTypeBlockElems(t), want[i], w, got_bits[i]);
      return buf;
    }
  }
  return "";
}

TEST(CudaDequantizeTest, EveryTypeMatchesHostDequantizeRowBitwise) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  uint32_t seed = 7;
  for (DType t : kTypes) {
    // 41 * 256 elements: several 2048-element thread blocks and a partial last one.
    const int64_t elems = 41 * 256, blocks = elems / DTypeBlockElems(t);
    const std::vector<uint8_t> raw = RandomBlocks(t, blocks, seed++);
    std::vector<float> want(static_cast<size_t>(elems));
    DequantizeRow(raw.data(), t, elems, want.data());
    std::vector<uint16_t> want_bf16(want.size());
    for (size_t i = 0; i < want.size(); ++i) want_bf16[i] = F32ToBf16(want[i]);

    DeviceBuffer<uint8_t> src(raw);
    DeviceBuffer<uint32_t> f32(static_cast<size_t>(elems));
    DeviceBuffer<uint16_t> bf16(static_cast<size_t>(elems));
    ASSERT_EQ(kernels::cuda::Dequantize(src.get(), t, elems, f32.get(), ElemType::kF32, nullptr), cudaSuccess);
    ASSERT_EQ(kernels::cuda::Dequantize(src.get(), t, elems, bf16.get(), ElemType::kBF16, nullptr), cudaSuccess);
    EXPECT_EQ(FirstDifference(want, f32.Download(), t), "") << "f32";
    const std::vector<uint16_t> got_bf16 = bf16.Download();
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) bad += got_bf16[i] != want_bf16[i];
    EXPECT_EQ(bad, 0u) << DTypeName(t) << ": bf16 values differing from F32ToBf16 of the host's f32";
  }
}

TEST(CudaDequantizeTest, RefusesWhatItCannotDecode) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  DeviceBuffer<float> buf(512);
  namespace kc = kernels::cuda;
  EXPECT_EQ(kc::Dequantize(buf.get(), DType::kBF16, 32, buf.get(), ElemType::kF32, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(kc::Dequantize(buf.get(), DType::kQ6_K, 32, buf.get(), ElemType::kF32, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(kc::Dequantize(buf.get(), DType::kQ4_0, 32, buf.get(), ElemType::kF16, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(kc::Dequantize(buf.get(), DType::kQ4_0, 0, buf.get(), ElemType::kF32, nullptr), cudaSuccess);
}

// Device memory of a backend, kept alive for the test.
struct Held {
  Backend* b;
  std::vector<std::shared_ptr<void>> keep;
  template <typename T>
  T* Put(const std::vector<T>& v) {
    StatusOr<std::shared_ptr<void>> p = b->Allocate(static_cast<int64_t>(v.size() * sizeof(T)));
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    keep.push_back(*p);
    b->CopyFromHost(keep.back().get(), v.data(), static_cast<int64_t>(v.size() * sizeof(T)));
    return static_cast<T*>(keep.back().get());
  }
  template <typename T>
  std::vector<T> Get(const void* p, size_t n) {
    std::vector<T> out(n);
    b->CopyToHost(out.data(), p, static_cast<int64_t>(n * sizeof(T)));
    const Status s = b->TakeError();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }
};

TEST(CudaDequantizeTest, UploadedQuantizedWeightEqualsHostDequantizedBf16) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  StatusOr<std::unique_ptr<Backend>> made = MakeCudaBackend(CudaBackendOptions{});
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Backend* gpu = made->get();
  Held mem{gpu, {}};
  const int64_t rows = 6, cols = 512, m = 3;
  const std::vector<float> x = cuda_test::RandomNormal(m * cols, 5);
  float* dx = mem.Put(x);
  uint32_t seed = 100;
  for (DType t : kTypes) {
    const std::vector<uint8_t> raw = RandomBlocks(t, rows * cols / DTypeBlockElems(t), seed++, 0.02f);
    std::vector<float> values(static_cast<size_t>(rows * cols));
    DequantizeRow(raw.data(), t, rows * cols, values.data());
    std::vector<uint16_t> host_bf16(values.size());
    for (size_t i = 0; i < values.size(); ++i) host_bf16[i] = F32ToBf16(values[i]);

    StatusOr<WeightView> quant = gpu->UploadWeight(WeightView{raw.data(), t, rows, cols});
    ASSERT_TRUE(quant.ok()) << quant.status().ToString();
    StatusOr<WeightView> plain = gpu->UploadWeight(WeightView{host_bf16.data(), DType::kBF16, rows, cols});
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    ASSERT_EQ(quant->dtype, DType::kBF16);
    const std::vector<uint16_t> held = mem.Get<uint16_t>(quant->data, host_bf16.size());
    size_t bad = 0;
    for (size_t i = 0; i < held.size(); ++i) bad += held[i] != host_bf16[i];
    EXPECT_EQ(bad, 0u) << DTypeName(t) << ": uploaded bf16 values differing from the host's";

    std::vector<float> y[2];
    const WeightView* w[2] = {&*quant, &*plain};
    for (int i = 0; i < 2; ++i) {
      float* dy = mem.Put(std::vector<float>(m * rows, 0.0f));
      gpu->Linear(dx, m, *w[i], nullptr, dy, rows);
      y[i] = mem.Get<float>(dy, static_cast<size_t>(m * rows));
    }
    EXPECT_TRUE(cuda_test::BitwiseEqual(y[0].data(), y[1].data(), y[0].size())) << DTypeName(t);
  }
  // A row length that is not a whole number of blocks is refused, naming the type.
  const std::vector<uint8_t> raw(64);
  StatusOr<WeightView> refused = gpu->UploadWeight(WeightView{raw.data(), DType::kQ6_K, 1, 100});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().ToString().find("q6_k"), std::string::npos) << refused.status().ToString();
}

// y = x w^T by QuantGemv against LinearTiled on the f32-dequantized weight (the same
// products summed in another order: |difference| <= 2 k 2^-24 sum |x w|), every row of
// a batch bitwise equal to its result in any other batch, padding columns untouched.
TEST(CudaQuantGemvTest, MatchesDequantizedTiledGemmAndIsBatchInvariant) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  namespace kc = kernels::cuda;
  const int64_t n = 37, k = 512, ldy = n + 3, mmax = 17;  // 37: a partial thread block
  const float kPad = -7.25f;
  uint32_t seed = 300;
  for (DType t : {DType::kQ4_K, DType::kQ6_K}) {
    const std::vector<uint8_t> raw = RandomBlocks(t, n * k / 256, seed++, 0.05f);
    std::vector<float> wf(static_cast<size_t>(n * k));
    DequantizeRow(raw.data(), t, n * k, wf.data());
    const std::vector<float> x = cuda_test::RandomNormal(mmax * k, seed++), bias = cuda_test::RandomNormal(n, seed++);
    DeviceBuffer<uint8_t> dw(raw);
    DeviceBuffer<float> dwf(wf.size()), dx(x), dbias(bias), ref(std::vector<float>(mmax * ldy, kPad));
    ASSERT_EQ(kc::Dequantize(dw.get(), t, n * k, dwf.get(), ElemType::kF32, nullptr), cudaSuccess);
    ASSERT_EQ(kc::LinearTiled(dx.get(), mmax, k, dwf.get(), ElemType::kF32, n, dbias.get(), ref.get(), ldy, nullptr),
              cudaSuccess);
    const std::vector<float> want = ref.Download();
    std::vector<float> full;
    for (int64_t m : {mmax, int64_t{1}, int64_t{3}, int64_t{9}}) {
      DeviceBuffer<float> dy(std::vector<float>(m * ldy, kPad));
      ASSERT_EQ(kc::QuantGemv(dx.get(), m, k, dw.get(), t, n, dbias.get(), dy.get(), ldy, nullptr), cudaSuccess);
      const std::vector<float> got = dy.Download();
      if (m == mmax) full = got;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < ldy; ++j) {
          const float g = got[i * ldy + j];
          if (j >= n) {
            ASSERT_EQ(g, kPad) << "padding column written";
            continue;
          }
          ASSERT_EQ(std::memcmp(&g, &full[i * ldy + j], 4), 0)
              << DTypeName(t) << " m=" << m << ": row " << i << " differs from the same row in the m=17 batch";
          double mass = std::fabs(bias[j]);
          for (int64_t c = 0; c < k; ++c) mass += std::fabs(static_cast<double>(x[i * k + c]) * wf[j * k + c]);
          EXPECT_LE(std::fabs(static_cast<double>(g) - want[i * ldy + j]), 2.0 * k * 0x1p-24 * mass)
              << DTypeName(t) << " y[" << i << ", " << j << "]";
        }
      }
    }
    // The last row alone, from an offset x.
    DeviceBuffer<float> one(static_cast<size_t>(n));
    ASSERT_EQ(kc::QuantGemv(dx.get() + (mmax - 1) * k, 1, k, dw.get(), t, n, dbias.get(), one.get(), n, nullptr),
              cudaSuccess);
    EXPECT_EQ(std::memcmp(one.Download().data(), &full[(mmax - 1) * ldy], n * 4), 0) << DTypeName(t);
  }
}

// x rows that are one-hot (a 1 at column c_i) read single weights out: y[i, j] must
// be w[j, c_i] exactly (the lane decoders reproduce DequantizeRow), for columns that
// cover every lane and position within a lane's 8.
TEST(CudaQuantGemvTest, OneHotRowsReadExactWeights) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  const int64_t n = 9, k = 512, m = 128;
  uint32_t seed = 400;
  for (DType t : {DType::kQ4_K, DType::kQ6_K}) {
    const std::vector<uint8_t> raw = RandomBlocks(t, n * k / 256, seed++);
    std::vector<float> wf(static_cast<size_t>(n * k));
    DequantizeRow(raw.data(), t, n * k, wf.data());
    std::vector<float> x(static_cast<size_t>(m * k), 0.0f);
    for (int64_t i = 0; i < m; ++i) x[i * k + 4 * i + i % 4] = 1.0f;
    DeviceBuffer<uint8_t> dw(raw);
    DeviceBuffer<float> dx(x), dy(static_cast<size_t>(m * n));
    ASSERT_EQ(kernels::cuda::QuantGemv(dx.get(), m, k, dw.get(), t, n, nullptr, dy.get(), n, nullptr), cudaSuccess);
    const std::vector<float> y = dy.Download();
    int bad = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) bad += y[i * n + j] != wf[j * k + 4 * i + i % 4];
    }
    EXPECT_EQ(bad, 0) << DTypeName(t) << ": weights read through one-hot rows differing from DequantizeRow's";
  }
  DeviceBuffer<float> buf(1024);
  namespace kc = kernels::cuda;
  EXPECT_EQ(kc::QuantGemv(buf.get(), 1, 256, buf.get(), DType::kQ4_0, 1, nullptr, buf.get(), 1, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(kc::QuantGemv(buf.get(), 1, 100, buf.get(), DType::kQ4_K, 1, nullptr, buf.get(), 1, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(kc::QuantGemv(buf.get() + 1, 1, 256, buf.get(), DType::kQ6_K, 1, nullptr, buf.get(), 1, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace tessera
