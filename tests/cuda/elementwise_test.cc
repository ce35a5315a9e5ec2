// CUDA Embedding, Rope, SiluMul, GatherRows, ConvertFromF32 and AddBias against the
// CPU kernels (kernels/cpu/ops.h) or plain host loops, incl. odd sizes and
// unaligned pointers (the scalar fallbacks of the vectorised kernels).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gather_rows.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/silu_mul.cuh"
#include "tests/cuda/cuda_test_util.h"

namespace tessera::kernels {
namespace {

using cuda_test::BitwiseEqual;
using cuda_test::DeviceBuffer;
using cuda_test::RandomNormal;

// Distance in units in the last place between two finite floats of any sign.
int64_t UlpDistance(float a, float b) {
  auto ordered = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  const int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

std::vector<uint16_t> ToHalfBits(const std::vector<float>& v, cuda::ElemType t) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = t == cuda::ElemType::kF16 ? F32ToF16(v[i]) : F32ToBf16(v[i]);
  return out;
}

DType ToDType(cuda::ElemType t) {
  return t == cuda::ElemType::kF32 ? DType::kF32 : t == cuda::ElemType::kF16 ? DType::kF16 : DType::kBF16;
}

TEST(CudaEmbeddingTest, MatchesCpuExactlyForEveryTableType) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  const int64_t vocab = 50;
  for (cuda::ElemType type : {cuda::ElemType::kF32, cuda::ElemType::kF16, cuda::ElemType::kBF16}) {
    for (int64_t dim : {1, 3, 8, 100}) {
      for (int64_t shift : {0, 1}) {  // 1: unaligned output, the scalar path
        SCOPED_TRACE(testing::Message() << "type " << static_cast<int>(type) << " dim " << dim << " shift " << shift);
        const std::vector<float> tab = RandomNormal(vocab * dim, 41 + dim);
        std::vector<int32_t> ids = {0, 49, 7, 7, 13, 48};
        const int64_t n = static_cast<int64_t>(ids.size());
        std::vector<float> want(n * dim);
        const bool f32 = type == cuda::ElemType::kF32;
        const std::vector<uint16_t> bits = f32 ? std::vector<uint16_t>(1) : ToHalfBits(tab, type);
        const void* host_tab = f32 ? static_cast<const void*>(tab.data()) : bits.data();
        DeviceBuffer<float> tab32(tab);
        DeviceBuffer<uint16_t> tab16(bits);
        cpu::Embedding(host_tab, ToDType(type), dim, ids.data(), n, want.data(), nullptr);
        DeviceBuffer<int32_t> dids(ids);
        DeviceBuffer<float> dout(n * dim + shift);
        const void* dtab = f32 ? static_cast<const void*>(tab32.get()) : tab16.get();
        ASSERT_EQ(cuda::Embedding(dtab, type, dim, dids.get(), n, dout.get() + shift, nullptr), cudaSuccess);
        EXPECT_TRUE(BitwiseEqual(dout.Download().data() + shift, want.data(), n * dim));
      }
    }
  }
}

// cos/sin table as engine/rope.h builds it for default RoPE (theta 10000).
std::vector<float> RopeTable(int64_t max_pos, int64_t rot_dim) {
  std::vector<float> t(max_pos * rot_dim);
  const int64_t half = rot_dim / 2;
  for (int64_t p = 0; p < max_pos; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double a = p * std::pow(10000.0, -2.0 * i / rot_dim);
      t[p * rot_dim + i] = static_cast<float>(std::cos(a));
      t[p * rot_dim + half + i] = static_cast<float>(std::sin(a));
    }
  }
  return t;
}

TEST(CudaRopeTest, MatchesCpuSkipsPaddingAndIsBatchInvariant) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  struct Shape {
    int64_t head_dim, rot_dim;
  };
  for (Shape s : {Shape{8, 8}, Shape{64, 64}, Shape{128, 64}, Shape{6, 4}, Shape{128, 128}}) {
    SCOPED_TRACE(testing::Message() << "head_dim " << s.head_dim << " rot_dim " << s.rot_dim);
    const int64_t tokens = 6, heads = 4, stride = heads * s.head_dim + 3, max_pos = 64;
    const std::vector<int32_t> pos = {0, 5, -1, 63, 17, -1};
    const std::vector<float> x = RandomNormal(tokens * stride, 51 + s.head_dim, 2.f);
    const std::vector<float> table = RopeTable(max_pos, s.rot_dim);
    std::vector<float> want = x;
    for (int64_t t = 0; t < tokens; ++t) {  // the CPU kernel has no padding rule: skip here
      if (pos[t] >= 0) {
        cpu::Rope(want.data() + t * stride, 1, heads, s.head_dim, stride, s.rot_dim, &pos[t], table.data(),
                  nullptr);
      }
    }
    DeviceBuffer<float> dx(x), dtab(table);
    DeviceBuffer<int32_t> dpos(pos);
    ASSERT_EQ(cuda::Rope(dx.get(), tokens, heads, s.head_dim, stride, s.rot_dim, dpos.get(), dtab.get(), nullptr),
              cudaSuccess);
    const std::vector<float> got = dx.Download();
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t c = 0; c < stride; ++c) {
        const int64_t i = t * stride + c;
        const int64_t d = c % s.head_dim;
        const bool rotated = pos[t] >= 0 && c < heads * s.head_dim && d < s.rot_dim;
        if (!rotated) {
          EXPECT_EQ(got[i], x[i]) << "t " << t << " c " << c;  // untouched: exact
        } else {
          // x1*c - x2*s: the GPU may contract one product into an FMA.
          const int64_t base = i - d, half = s.rot_dim / 2, j = d % half;
          const float bound = 5e-7f * (std::fabs(x[base + j]) + std::fabs(x[base + j + half])) + 1e-30f;
          EXPECT_NEAR(got[i], want[i], bound) << "t " << t << " c " << c;
        }
      }
    }
    // Token 3 alone equals token 3 in the batch, bitwise.
    DeviceBuffer<float> d1(std::vector<float>(x.begin() + 3 * stride, x.begin() + 4 * stride));
    ASSERT_EQ(cuda::Rope(d1.get(), 1, heads, s.head_dim, stride, s.rot_dim, dpos.get() + 3, dtab.get(), nullptr),
              cudaSuccess);
    EXPECT_TRUE(BitwiseEqual(d1.Download().data(), got.data() + 3 * stride, stride));
  }
}

TEST(CudaSiluMulTest, MatchesCpuWithinUlpsAndIsBatchInvariant) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  for (int64_t inter : {1, 3, 4, 64, 130, 1024}) {
    for (int64_t shift : {0, 1}) {
      SCOPED_TRACE(testing::Message() << "inter " << inter << " shift " << shift);
      const int64_t rows = 5;
      std::vector<float> gu = RandomNormal(rows * 2 * inter, 61 + inter, 3.f);
      gu[0] = -100.f;  // exp(100) overflows: silu -> -0
      std::vector<float> want(rows * inter);
      cpu::SiluMul(gu.data(), rows, inter, want.data(), nullptr);
      DeviceBuffer<float> dgu(gu), dout(rows * inter + shift), d1(inter + shift);
      ASSERT_EQ(cuda::SiluMul(dgu.get(), rows, inter, dout.get() + shift, nullptr), cudaSuccess);
      const std::vector<float> got = dout.Download();
      for (int64_t i = 0; i < rows * inter; ++i) {
        // expf on the GPU is within 2 ulp of the correctly rounded value.
        EXPECT_LE(UlpDistance(got[shift + i], want[i]), 4) << i << ": " << got[shift + i] << " vs " << want[i];
      }
      ASSERT_EQ(cuda::SiluMul(dgu.get() + 3 * 2 * inter, 1, inter, d1.get() + shift, nullptr), cudaSuccess);
      EXPECT_TRUE(BitwiseEqual(d1.Download().data() + shift, got.data() + shift + 3 * inter, inter));
    }
  }
}

TEST(CudaGatherRowsTest, CopiesTheIndexedRowsExactly) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  for (int64_t cols : {1, 5, 8, 64, 899}) {
    for (int64_t shift : {0, 1}) {
      SCOPED_TRACE(testing::Message() << "cols " << cols << " shift " << shift);
      const int64_t src_rows = 20;
      const std::vector<float> src = RandomNormal(src_rows * cols, 71 + cols);
      const std::vector<int32_t> idx = {19, 0, 3, 3, 11};
      const int64_t n = static_cast<int64_t>(idx.size());
      DeviceBuffer<float> dsrc(src), ddst(n * cols + shift);
      DeviceBuffer<int32_t> didx(idx);
      ASSERT_EQ(cuda::GatherRows(dsrc.get(), cols, didx.get(), n, ddst.get() + shift, nullptr), cudaSuccess);
      const std::vector<float> got = ddst.Download();
      for (int64_t r = 0; r < n; ++r) {
        EXPECT_TRUE(BitwiseEqual(got.data() + shift + r * cols, src.data() + idx[r] * cols, cols)) << "row " << r;
      }
    }
  }
}

TEST(CudaConvertTest, RoundsToNearestEvenIntoStridedRows) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  const float kInf = std::numeric_limits<float>::infinity();
  for (cuda::ElemType type : {cuda::ElemType::kF32, cuda::ElemType::kF16, cuda::ElemType::kBF16}) {
    for (int64_t cols : {1, 5, 64, 300}) {
      SCOPED_TRACE(testing::Message() << "type " << static_cast<int>(type) << " cols " << cols);
      const int64_t rows = 7, ld_src = cols + 3, ld_dst = cols + 2;
      std::vector<float> src = RandomNormal(rows * ld_src, 81 + cols, 10.f);
      // Rounding edge cases: ties, f16 overflow and subnormals, infinities.
      const float edge[] = {65519.f, 65520.f, 1e6f, -kInf, kInf, 1.0009765625f, 1.00048828125f,
                            3e-8f, -6e-5f, 1.00390625f, 0.f, -0.f};
      for (size_t i = 0; i < sizeof(edge) / sizeof(edge[0]); ++i) src[(i * 7) % src.size()] = edge[i];
      const int64_t esize = type == cuda::ElemType::kF32 ? 4 : 2;
      std::vector<uint8_t> want(rows * ld_dst * esize, 0xAB);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const float v = src[r * ld_src + c];
          uint8_t* dst = want.data() + (r * ld_dst + c) * esize;
          if (type == cuda::ElemType::kF32) {
            std::memcpy(dst, &v, 4);
          } else {
            const uint16_t h = type == cuda::ElemType::kF16 ? F32ToF16(v) : F32ToBf16(v);
            std::memcpy(dst, &h, 2);
          }
        }
      }
      DeviceBuffer<float> dsrc(src);
      DeviceBuffer<uint8_t> ddst(std::vector<uint8_t>(want.size(), 0xAB));
      ASSERT_EQ(cuda::ConvertFromF32(dsrc.get(), ld_src, rows, cols, ddst.get(), type, ld_dst, nullptr),
                cudaSuccess);
      const std::vector<uint8_t> got = ddst.Download();
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size()));  // padding keeps 0xAB
    }
  }
}

TEST(CudaAddBiasTest, AddsBiasToEveryRowAndLeavesPaddingAlone) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  for (int64_t cols : {1, 37, 513}) {
    SCOPED_TRACE(cols);
    const int64_t rows = 4, ldy = cols + 3;
    const std::vector<float> y = RandomNormal(rows * ldy, 91 + cols), bias = RandomNormal(cols, 92);
    std::vector<float> want = y;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) want[r * ldy + c] += bias[c];
    }
    DeviceBuffer<float> dy(y), db(bias);
    ASSERT_EQ(cuda::AddBias(dy.get(), ldy, rows, cols, db.get(), nullptr), cudaSuccess);
    EXPECT_TRUE(BitwiseEqual(dy.Download().data(), want.data(), want.size()));
  }
}

TEST(CudaElementwiseTest, EmptyLaunchesSucceedWithoutWriting) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  DeviceBuffer<float> buf(std::vector<float>{1.f, 2.f, 3.f, 4.f});
  DeviceBuffer<int32_t> ids(std::vector<int32_t>{0});
  EXPECT_EQ(cuda::Embedding(buf.get(), cuda::ElemType::kF32, 4, ids.get(), 0, buf.get(), nullptr), cudaSuccess);
  EXPECT_EQ(cuda::Rope(buf.get(), 0, 1, 4, 4, 4, ids.get(), buf.get(), nullptr), cudaSuccess);
  EXPECT_EQ(cuda::SiluMul(buf.get(), 0, 2, buf.get(), nullptr), cudaSuccess);
  EXPECT_EQ(cuda::GatherRows(buf.get(), 4, ids.get(), 0, buf.get(), nullptr), cudaSuccess);
  EXPECT_EQ(cuda::ConvertFromF32(buf.get(), 4, 0, 4, buf.get(), cuda::ElemType::kF16, 4, nullptr), cudaSuccess);
  EXPECT_EQ(cuda::AddBias(buf.get(), 4, 0, 4, buf.get(), nullptr), cudaSuccess);
  EXPECT_EQ(buf.Download(), (std::vector<float>{1.f, 2.f, 3.f, 4.f}));
}

}  // namespace
}  // namespace tessera::kernels
