// The decode-sized quantized Linear (kernels/cpu/kquant_gemv_avx2.cc) against every other
// kernel of its types, called directly on column ranges as the threads split them: bitwise
// equal to the scalar kernels, the tiled AVX2 kernels and the tiled AVX-512 VNNI kernels
// (where the CPU has them), for m = 1..4 (3: a group of 2 rows and one of 1), random and
// extreme blocks and activations, partial 8-column groups, and ranges with odd ends.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/quant.h"
#include "kernels/cpu/internal.h"
#include "kernels/cpu/ops.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace tessera::kernels::cpu {
namespace {

constexpr DType kTypes[] = {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kIQ4_XS, DType::kQ2_K, DType::kQ3_K};

// Byte offsets of the f16 d and dmin (-1: none).
void F16Offsets(DType t, int* d, int* dmin) {
  *dmin = -1;
  switch (t) {
    case DType::kQ4_K: *d = 0, *dmin = 2; break;
    case DType::kQ5_K: *d = 0, *dmin = 2; break;
    case DType::kQ6_K: *d = 208; break;
    case DType::kQ2_K: *d = 80, *dmin = 82; break;
    case DType::kQ3_K: *d = 108; break;
    default: *d = 0; break;  // IQ4_XS
  }
}

// Every byte random, or one byte everywhere (0xFF: every value, scale and min at its max;
// 0x80 / 0x7F: Q6_K's int8 scales at -128 / 127; 0x00: all lowest, Q3_K's hmask clear); finite f16 scales.
std::vector<uint8_t> MakeBlocks(DType type, int64_t n, int64_t k, int fill, uint32_t seed) {
  const int64_t bb = DTypeBlockBytes(type), count = n * k / 256;
  std::vector<uint8_t> w(static_cast<size_t>(count * bb));
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> mag(0.002f, 0.05f);
  int d_off, dmin_off;
  F16Offsets(type, &d_off, &dmin_off);
  for (int64_t blk = 0; blk < count; ++blk) {
    uint8_t* p = w.data() + blk * bb;
    for (int64_t i = 0; i < bb; ++i) p[i] = static_cast<uint8_t>(fill < 0 ? byte(rng) : fill);
    const uint16_t d = F32ToF16(fill < 0 ? (byte(rng) % 2 ? 1.0f : -1.0f) * mag(rng) : 0.5f);
    std::memcpy(p + d_off, &d, 2);
    if (dmin_off >= 0) {
      const uint16_t dm = F32ToF16(fill < 0 ? mag(rng) : 0.25f);
      std::memcpy(p + dmin_off, &dm, 2);
    }
  }
  return w;
}

// Activations as Linear quantizes them (sums per 16 too, which only some types read).
struct Acts {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int16_t> sums, sums16;
  internal::QuantActs view;
};
Acts Quantize(const std::vector<float>& x, int64_t m, int64_t k) {
  Acts a{std::vector<int8_t>(m * k), std::vector<float>(m * k / 256), std::vector<int16_t>(m * k / 32),
         std::vector<int16_t>(m * k / 16), {}};
  internal::QuantizeActsScalar(x.data(), m, k, 256, a.q.data(), a.d.data(), a.sums.data(), a.sums16.data());
  a.view = {a.q.data(), a.d.data(), a.sums.data(), m, k, a.sums16.data()};
  return a;
}

using ColsFn = void (*)(const internal::QuantActs&, const void*, DType, int64_t, int64_t, const float*, float*,
                        int64_t);

// y over the column ranges [cuts[i], cuts[i + 1]) (as threads split them), ldy > n; the
// columns outside [cuts.front(), cuts.back()) keep the sentinel.
std::vector<float> RunCols(ColsFn fn, const Acts& a, const std::vector<uint8_t>& w, DType type, int64_t n,
                       const std::vector<int64_t>& cuts, const float* bias) {
  const int64_t ldy = n + 3;
  std::vector<float> y(a.view.m * ldy, -7.0f);
  for (size_t i = 0; i + 1 < cuts.size(); ++i) fn(a.view, w.data(), type, cuts[i], cuts[i + 1], bias, y.data(), ldy);
  return y;
}

TEST(QuantGemvTest, EqualsEveryOtherKernelBitwise) {
  if (!UseAvx2()) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  const bool vnni = UseAvx512Vnni();
  const int64_t n = 29;
  const auto bias = RandomVec(n, 41, -1.0f, 1.0f);
  for (DType type : kTypes) {
    for (int fill : {-1, 0x00, 0xFF, 0x80, 0x7F}) {
      for (int64_t k : {256, 768}) {
        if (fill >= 0 && k != 256) continue;
        const auto w = MakeBlocks(type, n, k, fill, 43 + static_cast<uint32_t>(k));
        for (int64_t m : {1, 2, 3, 4}) {
          SCOPED_TRACE(std::string(DTypeName(type)) + " fill=" + std::to_string(fill) + " k=" + std::to_string(k) +
                       " m=" + std::to_string(m));
          auto x = RandomVec(m * k, 45 + static_cast<uint32_t>(m), -3.0f, 3.0f);
          // Row 0 at +-1 (+-127 quantized: the largest sums) with extreme blocks and for
          // m >= 3; the last row has a zero block (d_x = 0).
          if (fill >= 0 || m >= 3) {
            for (int64_t e = 0; e < k; ++e) x[e] = (e % 5 < 2) ? -1.0f : 1.0f;
          }
          if (m > 1) std::fill(x.begin() + (m - 1) * k, x.begin() + (m - 1) * k + 256, 0.0f);
          const Acts a = Quantize(x, m, k);
          for (const std::vector<int64_t>& cuts :
               {std::vector<int64_t>{0, n}, std::vector<int64_t>{0, 5, 13, 24, n}, std::vector<int64_t>{3, 11, 20}}) {
            const float* bz = cuts.size() == 3 ? nullptr : bias.data();
            const auto ref = RunCols(internal::LinearQuantColsScalar, a, w, type, n, cuts, bz);
            const auto gemv = RunCols(internal::QuantGemvColsAvx2, a, w, type, n, cuts, bz);
            const auto tiled = RunCols(internal::LinearQuantColsAvx2, a, w, type, n, cuts, bz);
            ASSERT_TRUE(BitEqual(gemv.data(), ref.data(), static_cast<int64_t>(ref.size()))) << "gemv != scalar";
            ASSERT_TRUE(BitEqual(gemv.data(), tiled.data(), static_cast<int64_t>(ref.size()))) << "gemv != avx2";
            if (vnni) {
              const auto v = RunCols(internal::LinearQuantColsAvx512, a, w, type, n, cuts, bz);
              ASSERT_TRUE(BitEqual(gemv.data(), v.data(), static_cast<int64_t>(ref.size()))) << "gemv != vnni";
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace tessera::kernels::cpu
