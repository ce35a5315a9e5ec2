// CUDA paged-KV writes (f32/f16/bf16 caches, skipped slots) and block copies.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/block_copy.cuh"
#include "kernels/cuda/kv_write.cuh"
#include "tests/cuda/cuda_test_util.h"

namespace tessera::kernels {
namespace {

using cuda_test::DeviceBuffer;
using cuda_test::RandomNormal;

constexpr uint8_t kSentinel = 0xCD;

// The cache bytes expected after writing f32 values `v` with cache type t.
void PutConverted(float v, cuda::ElemType t, uint8_t* dst) {
  if (t == cuda::ElemType::kF32) {
    std::memcpy(dst, &v, 4);
  } else {
    const uint16_t h = t == cuda::ElemType::kF16 ? F32ToF16(v) : F32ToBf16(v);
    std::memcpy(dst, &h, 2);
  }
}

TEST(CudaWriteKvTest, WritesEveryCacheTypeThroughTheSlotMapping) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  struct Shape {
    int64_t kv_heads, head_dim, stride_pad;
  };
  // {2, 8, 4}: vector path (row and strides multiples of 4); the others scalar.
  for (Shape s : {Shape{2, 8, 4}, Shape{2, 8, 3}, Shape{3, 5, 0}, Shape{1, 1, 1}}) {
    for (cuda::ElemType type : {cuda::ElemType::kF32, cuda::ElemType::kF16, cuda::ElemType::kBF16}) {
      SCOPED_TRACE(testing::Message() << "kv_heads " << s.kv_heads << " head_dim " << s.head_dim << " pad "
                                      << s.stride_pad << " type " << static_cast<int>(type));
      const int64_t num_blocks = 6, block_size = 4, tokens = 9;
      const int64_t row = s.kv_heads * s.head_dim, stride = row + s.stride_pad;
      const int64_t esize = type == cuda::ElemType::kF32 ? 4 : 2;
      const int64_t cache_elems = num_blocks * block_size * row;
      const std::vector<int64_t> slots = {5, -1, 0, 23, 12, -1, 7, 13, 22};
      const std::vector<float> k = RandomNormal(tokens * stride, 101 + row), v = RandomNormal(tokens * stride, 102);
      std::vector<uint8_t> want_k(cache_elems * esize, kSentinel), want_v = want_k;
      for (int64_t t = 0; t < tokens; ++t) {
        if (slots[t] < 0) continue;
        for (int64_t i = 0; i < row; ++i) {
          PutConverted(k[t * stride + i], type, want_k.data() + (slots[t] * row + i) * esize);
          PutConverted(v[t * stride + i], type, want_v.data() + (slots[t] * row + i) * esize);
        }
      }
      if (type == cuda::ElemType::kF32) {  // the CPU kernel agrees with the host expectation
        std::vector<uint8_t> cpu_k(want_k.size(), kSentinel), cpu_v = cpu_k;
        cpu::WriteKv(k.data(), stride, v.data(), stride, tokens, s.kv_heads, s.head_dim, slots.data(),
                     reinterpret_cast<float*>(cpu_k.data()), reinterpret_cast<float*>(cpu_v.data()));
        ASSERT_EQ(cpu_k, want_k);
        ASSERT_EQ(cpu_v, want_v);
      }
      DeviceBuffer<float> dk(k), dv(v);
      DeviceBuffer<int64_t> dslots(slots);
      DeviceBuffer<uint8_t> kc(std::vector<uint8_t>(want_k.size(), kSentinel)), vc(kc.Download());
      ASSERT_EQ(cuda::WriteKv(dk.get(), stride, dv.get(), stride, tokens, s.kv_heads, s.head_dim, dslots.get(),
                              kc.get(), vc.get(), type, nullptr),
                cudaSuccess);
      EXPECT_EQ(kc.Download(), want_k);
      EXPECT_EQ(vc.Download(), want_v);
    }
  }
}

TEST(CudaWriteKvTest, ZeroTokensIsANoOp) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  DeviceBuffer<float> kv(std::vector<float>{1.f, 2.f});
  DeviceBuffer<int64_t> slots(std::vector<int64_t>{0});
  EXPECT_EQ(cuda::WriteKv(kv.get(), 2, kv.get(), 2, 0, 1, 2, slots.get(), kv.get(), kv.get(),
                          cuda::ElemType::kF32, nullptr),
            cudaSuccess);
  EXPECT_EQ(kv.Download(), (std::vector<float>{1.f, 2.f}));
}

TEST(CudaCopyBlocksTest, CopiesEveryPairInEveryBase) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  for (int64_t block_bytes : {16, 64, 4096 + 48}) {
    SCOPED_TRACE(block_bytes);
    const int64_t num_blocks = 8, num_bases = 5;
    std::mt19937 rng(111 + block_bytes);
    std::vector<std::vector<uint8_t>> want(num_bases);
    std::vector<DeviceBuffer<uint8_t>> bufs;
    std::vector<void*> base_ptrs;
    bufs.reserve(num_bases);
    for (auto& w : want) {
      w.resize(num_blocks * block_bytes);
      for (auto& b : w) b = static_cast<uint8_t>(rng());
      bufs.emplace_back(w);
      base_ptrs.push_back(bufs.back().get());
    }
    const std::vector<int64_t> pairs = {1, 5, 2, 6, 0, 7, 1, 3};  // [src, dst]; no dst is a src
    for (auto& w : want) {
      for (size_t p = 0; p < pairs.size(); p += 2) {
        std::memcpy(w.data() + pairs[p + 1] * block_bytes, w.data() + pairs[p] * block_bytes, block_bytes);
      }
    }
    std::vector<uint64_t> base_bits(num_bases);
    std::memcpy(base_bits.data(), base_ptrs.data(), num_bases * sizeof(void*));
    DeviceBuffer<uint64_t> dbases(base_bits);
    DeviceBuffer<int64_t> dpairs(pairs);
    ASSERT_EQ(cuda::CopyBlocks(reinterpret_cast<void* const*>(dbases.get()), num_bases, block_bytes,
                               dpairs.get(), static_cast<int64_t>(pairs.size() / 2), nullptr),
              cudaSuccess);
    for (int64_t b = 0; b < num_bases; ++b) EXPECT_EQ(bufs[b].Download(), want[b]) << "base " << b;
  }
}

TEST(CudaCopyBlocksTest, RejectsBlockSizesThatAreNotVectorMultiples) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  DeviceBuffer<uint64_t> bases(1);
  DeviceBuffer<int64_t> pairs(std::vector<int64_t>{0, 1});
  EXPECT_EQ(cuda::CopyBlocks(reinterpret_cast<void* const*>(bases.get()), 1, 24, pairs.get(), 1, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::CopyBlocks(reinterpret_cast<void* const*>(bases.get()), 1, 32, pairs.get(), 0, nullptr),
            cudaSuccess);
}

}  // namespace
}  // namespace tessera::kernels
