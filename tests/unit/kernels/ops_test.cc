// Kernel tests: every op against a double-precision reference, on both the AVX2 and
// the scalar path, plus bitwise batch invariance (a row computed inside a batch ==
// the same row alone, 1 thread == 2 threads).
#include "kernels/cpu/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/unit/kernels/kernel_test_util.h"

namespace tessera::kernels::cpu {
namespace {

// Weights stored as `type` plus their exact f32 values (for the reference).
struct Weights {
  DType type;
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};

Weights MakeWeights(DType type, int64_t count, uint32_t seed) {
  Weights w{type, {}, RandomVec(count, seed)};
  w.bytes.resize(count * DTypeSize(type));
  for (int64_t i = 0; i < count; ++i) {
    if (type == DType::kF32) {
      std::memcpy(w.bytes.data() + 4 * i, &w.values[i], 4);
      continue;
    }
    const uint16_t h = type == DType::kBF16 ? F32ToBf16(w.values[i]) : F32ToF16(w.values[i]);
    w.values[i] = type == DType::kBF16 ? Bf16ToF32(h) : F16ToF32(h);
    std::memcpy(w.bytes.data() + 2 * i, &h, 2);
  }
  return w;
}

// Runs each test once on the AVX2 path and once on the scalar path.
class KernelPathTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!SetUseAvx2ForTesting(GetParam())) GTEST_SKIP() << "CPU lacks AVX2/FMA/F16C";
  }
  void TearDown() override { ClearUseAvx2ForTesting(); }
};

std::string PathName(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "Avx2" : "Scalar";
}

// ---------------------------------------------------------------- Linear

struct LinearShape {
  int64_t m, k, n;
};

// Checks Linear against a double reference; |err| <= 1e-5 * sum |x w| (+ |bias|).
void CheckLinear(const LinearShape& s, DType type, bool with_bias, ThreadPool* pool) {
  const auto x = RandomVec(s.m * s.k, 11 + s.m);
  const Weights w = MakeWeights(type, s.n * s.k, 23 + s.k);
  const auto bias = RandomVec(s.n, 5);
  const int64_t ldy = s.n + 3;
  std::vector<float> y(s.m * ldy, -7.0f);
  Linear(x.data(), s.m, s.k, w.bytes.data(), type, s.n, with_bias ? bias.data() : nullptr,
         y.data(), ldy, pool);
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double ref = with_bias ? bias[j] : 0.0, mag = std::fabs(ref);
      for (int64_t kk = 0; kk < s.k; ++kk) {
        const double p = static_cast<double>(x[i * s.k + kk]) * w.values[j * s.k + kk];
        ref += p;
        mag += std::fabs(p);
      }
      ASSERT_NEAR(y[i * ldy + j], ref, 1e-5 * mag + 1e-30)
          << "m=" << s.m << " k=" << s.k << " n=" << s.n << " at " << i << "," << j
          << " type " << DTypeName(type);
    }
    for (int64_t j = s.n; j < ldy; ++j) ASSERT_EQ(y[i * ldy + j], -7.0f) << "wrote past n";
  }
}

const LinearShape kLinearShapes[] = {{1, 7, 5},    {1, 64, 33},  {3, 13, 17},  {2, 40, 9},
                                     {17, 37, 29}, {16, 8, 24},  {64, 100, 67}, {4, 896, 50},
                                     {33, 129, 26}, {1, 0, 3}};

TEST_P(KernelPathTest, LinearMatchesReference) {
  ThreadPool pool(2);
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const auto& s : kLinearShapes) {
      CheckLinear(s, type, /*with_bias=*/true, nullptr);
      CheckLinear(s, type, /*with_bias=*/false, &pool);
    }
  }
}

// Large M runs the cache-blocked GEMM; K > 1024 also splits K into blocks.
TEST_P(KernelPathTest, LinearLargeShapeThreaded) {
  ThreadPool pool(2);
  CheckLinear({70, 896, 200}, DType::kBF16, true, &pool);
  CheckLinear({1, 1000, 3000}, DType::kF16, true, &pool);
  CheckLinear({67, 2101, 31}, DType::kF32, true, &pool);
  CheckLinear({129, 1030, 101}, DType::kBF16, false, nullptr);
}

// Row i computed in a batch of M (any tiling, packing, thread count) is bitwise the
// row computed alone.
TEST_P(KernelPathTest, LinearIsBatchInvariant) {
  ThreadPool pool2(2);
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const LinearShape& s : {LinearShape{64, 133, 53}, LinearShape{40, 896, 71},
                                 LinearShape{19, 24, 8}, LinearShape{66, 2061, 26}}) {
      const auto x = RandomVec(s.m * s.k, 3);
      const Weights w = MakeWeights(type, s.n * s.k, 4);
      const auto bias = RandomVec(s.n, 6);
      std::vector<float> full(s.m * s.n), full2(s.m * s.n), part(s.m * s.n);
      Linear(x.data(), s.m, s.k, w.bytes.data(), type, s.n, bias.data(), full.data(), s.n,
             nullptr);
      Linear(x.data(), s.m, s.k, w.bytes.data(), type, s.n, bias.data(), full2.data(), s.n,
             &pool2);
      ASSERT_TRUE(BitEqual(full.data(), full2.data(), s.m * s.n)) << "1 vs 2 threads";
      for (int64_t i = 0; i < s.m; ++i) {  // each row alone
        std::vector<float> row(s.n);
        Linear(x.data() + i * s.k, 1, s.k, w.bytes.data(), type, s.n, bias.data(), row.data(),
               s.n, i % 2 ? &pool2 : nullptr);
        ASSERT_TRUE(BitEqual(row.data(), full.data() + i * s.n, s.n)) << "row " << i;
      }
      for (int64_t chunk : {3, 5, 17}) {  // ragged sub-batches
        for (int64_t i = 0; i < s.m; i += chunk) {
          const int64_t mm = std::min(chunk, s.m - i);
          Linear(x.data() + i * s.k, mm, s.k, w.bytes.data(), type, s.n, bias.data(),
                 part.data() + i * s.n, s.n, &pool2);
        }
        ASSERT_TRUE(BitEqual(part.data(), full.data(), s.m * s.n)) << "chunk " << chunk;
      }
      // A column window: the same columns computed as part of a narrower matrix.
      const int64_t n0 = 5, nn = s.n - 7;
      std::vector<float> sub(s.m * nn);
      Linear(x.data(), s.m, s.k, w.bytes.data() + n0 * s.k * DTypeSize(type), type, nn,
             bias.data() + n0, sub.data(), nn, &pool2);
      for (int64_t i = 0; i < s.m; ++i) {
        ASSERT_TRUE(BitEqual(sub.data() + i * nn, full.data() + i * s.n + n0, nn)) << i;
      }
    }
  }
}

// ---------------------------------------------------------------- Norms

double RefRmsScale(const float* r, int64_t dim, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(r[i]) * r[i];
  return 1.0 / std::sqrt(ss / dim + eps);
}

TEST_P(KernelPathTest, RmsNormMatchesReference) {
  ThreadPool pool(2);
  for (int64_t dim : {1, 7, 8, 31, 64, 100, 896, 4099}) {
    for (int64_t rows : {1, 3, 17}) {
      const auto x = RandomVec(rows * dim, 7 + dim, -3.0f, 3.0f);
      const auto w = RandomVec(dim, 8);
      std::vector<float> out(rows * dim);
      RmsNorm(x.data(), w.data(), rows, dim, 1e-6f, out.data(), &pool);
      for (int64_t r = 0; r < rows; ++r) {
        const double s = RefRmsScale(x.data() + r * dim, dim, 1e-6f);
        for (int64_t i = 0; i < dim; ++i) {
          const double ref = x[r * dim + i] * s * w[i];
          ASSERT_NEAR(out[r * dim + i], ref, 1e-5 * std::fabs(ref) + 1e-30) << dim << " " << i;
        }
      }
      std::vector<float> inplace = x;  // out may alias x
      RmsNorm(inplace.data(), w.data(), rows, dim, 1e-6f, inplace.data(), nullptr);
      ASSERT_TRUE(BitEqual(inplace.data(), out.data(), rows * dim));
    }
  }
}

TEST_P(KernelPathTest, AddRmsNormMatchesReference) {
  for (int64_t dim : {5, 64, 897}) {
    const int64_t rows = 3;
    const auto res0 = RandomVec(rows * dim, 1), x = RandomVec(rows * dim, 2);
    const auto w = RandomVec(dim, 3);
    std::vector<float> res = res0, out(rows * dim);
    AddRmsNorm(res.data(), x.data(), w.data(), rows, dim, 1e-5f, out.data(), nullptr);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> sum(dim);
      for (int64_t i = 0; i < dim; ++i) {
        sum[i] = res0[r * dim + i] + x[r * dim + i];
        ASSERT_EQ(res[r * dim + i], sum[i]);
      }
      const double s = RefRmsScale(sum.data(), dim, 1e-5f);
      for (int64_t i = 0; i < dim; ++i) {
        const double ref = sum[i] * s * w[i];
        ASSERT_NEAR(out[r * dim + i], ref, 1e-5 * std::fabs(ref) + 1e-30);
      }
    }
    // out aliasing x gives the same result.
    std::vector<float> res2 = res0, x2 = x;
    AddRmsNorm(res2.data(), x2.data(), w.data(), rows, dim, 1e-5f, x2.data(), nullptr);
    ASSERT_TRUE(BitEqual(x2.data(), out.data(), rows * dim));
    ASSERT_TRUE(BitEqual(res2.data(), res.data(), rows * dim));
  }
}

TEST_P(KernelPathTest, RmsNormIsBatchInvariant) {
  ThreadPool pool(2);
  const int64_t rows = 300, dim = 1003;  // enough work to run on both threads
  const auto x = RandomVec(rows * dim, 9);
  const auto w = RandomVec(dim, 10);
  std::vector<float> a(rows * dim), b(rows * dim), one(dim);
  RmsNorm(x.data(), w.data(), rows, dim, 1e-6f, a.data(), nullptr);
  RmsNorm(x.data(), w.data(), rows, dim, 1e-6f, b.data(), &pool);
  ASSERT_TRUE(BitEqual(a.data(), b.data(), rows * dim));
  for (int64_t r : {0, 1, 150, 299}) {
    RmsNorm(x.data() + r * dim, w.data(), 1, dim, 1e-6f, one.data(), nullptr);
    ASSERT_TRUE(BitEqual(one.data(), a.data() + r * dim, dim)) << r;
  }
  const auto delta = RandomVec(rows * dim, 12);
  std::vector<float> res = x, res2 = x, o1(rows * dim), o2(rows * dim);
  AddRmsNorm(res.data(), delta.data(), w.data(), 1, dim, 1e-6f, o1.data(), nullptr);
  AddRmsNorm(res2.data(), delta.data(), w.data(), rows, dim, 1e-6f, o2.data(), &pool);
  ASSERT_TRUE(BitEqual(o1.data(), o2.data(), dim));
  ASSERT_TRUE(BitEqual(res.data(), res2.data(), dim));
}

// ---------------------------------------------------------------- Elementwise

TEST_P(KernelPathTest, SiluMulMatchesReference) {
  for (int64_t inter : {1, 8, 13, 64, 4864}) {
    const int64_t rows = 3;
    auto gu = RandomVec(rows * 2 * inter, 4 + inter, -20.0f, 20.0f);
    std::vector<float> out(rows * inter);
    SiluMul(gu.data(), rows, inter, out.data(), nullptr);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < inter; ++i) {
        const double g = gu[r * 2 * inter + i], u = gu[r * 2 * inter + inter + i];
        const double ref = g / (1.0 + std::exp(-g)) * u;
        ASSERT_NEAR(out[r * inter + i], ref, 2e-6 * std::fabs(ref) + 1e-35) << g;
      }
    }
  }
}

// Sweeps the gate over the whole float exp range: checks the vectorised exp.
TEST_P(KernelPathTest, SiluAccurateOverFullRange) {
  const int64_t inter = 20001;
  std::vector<float> gu(2 * inter), out(inter);
  for (int64_t i = 0; i < inter; ++i) {
    gu[i] = -87.0f + 174.0f * static_cast<float>(i) / (inter - 1);
    gu[inter + i] = 1.0f;
  }
  SiluMul(gu.data(), 1, inter, out.data(), nullptr);
  for (int64_t i = 0; i < inter; ++i) {
    const double g = gu[i], ref = g / (1.0 + std::exp(-g));
    ASSERT_NEAR(out[i], ref, 1e-6 * std::fabs(ref)) << "g=" << g;
  }
  // Extremes stay finite and go to the right limits.
  const float ext[] = {-200.0f, -89.0f, 89.0f, 200.0f, 0.0f, -0.0f};
  std::vector<float> e(12), eo(6);
  for (int i = 0; i < 6; ++i) e[i] = ext[i], e[6 + i] = 2.0f;
  SiluMul(e.data(), 1, 6, eo.data(), nullptr);
  EXPECT_EQ(eo[0], 0.0f);
  EXPECT_NEAR(eo[1], 0.0f, 1e-30f);
  EXPECT_EQ(eo[2], 178.0f);
  EXPECT_EQ(eo[3], 400.0f);
  EXPECT_EQ(eo[4], 0.0f);
}

// 0.5 x (1 + tanh v) written as x / (1 + exp(-2v)): the same function, but the tanh
// form cancels to 0 in double once tanh(v) rounds to -1 (v < ~-19), where the true
// value (~x exp(2v), e.g. -2.5e-19 at x = -7.7) is still a normal f32.
double GeluTanhRef(double x) {
  const double v = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return x / (1.0 + std::exp(-2.0 * v));
}

TEST_P(KernelPathTest, GeluTanhMulMatchesReference) {
  ThreadPool pool(2);
  for (int64_t inter : {1, 8, 13, 64, 2304}) {
    const int64_t rows = 3;
    auto gu = RandomVec(rows * 2 * inter, 7 + inter, -12.0f, 12.0f);
    gu[0] = -60.0f;  // exp(2u) far past the f32 range: gelu -> -0
    std::vector<float> out(rows * inter), one(inter);
    GeluTanhMul(gu.data(), rows, inter, out.data(), &pool);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < inter; ++i) {
        const double g = gu[r * 2 * inter + i], u = gu[r * 2 * inter + inter + i];
        const double ref = GeluTanhRef(g) * u;
        // exp(-2v), v = sqrt(2/pi) (g + 0.044715 g^3), turns the f32 rounding of v into
        // a relative error ~|2v| ulp: the bound grows with |v| (a few ulp near 0).
        const double v = std::sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g);
        ASSERT_NEAR(out[r * inter + i], ref, 3e-7 * (4.0 + 2.0 * std::fabs(v)) * std::fabs(ref) + 1e-30)
            << "g=" << g;
      }
    }
    GeluTanhMul(gu.data() + 2 * 2 * inter, 1, inter, one.data(), nullptr);  // a row alone, 1 thread
    ASSERT_TRUE(BitEqual(one.data(), out.data() + 2 * inter, inter));
  }
}

TEST_P(KernelPathTest, SoftCapAndScaleMatchReference) {
  ThreadPool pool(2);
  const int64_t n = 10007;  // threads split it; the tail is not a whole vector
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = -200.0f + 400.0f * static_cast<float>(i) / (n - 1);
  x[5] = 1e-6f;  // tiny: the polynomial branch, relative accuracy
  x[6] = -0.3f;
  std::vector<float> capped = x, scaled = x;
  SoftCap(capped.data(), n, 30.0f, &pool);
  Scale(scaled.data(), n, 0.5f, &pool);
  for (int64_t i = 0; i < n; ++i) {
    const double ref = 30.0 * std::tanh(static_cast<double>(x[i]) / 30.0);
    ASSERT_NEAR(capped[i], ref, 6e-7 * std::fabs(ref) + 1e-37) << "x=" << x[i];
    ASSERT_EQ(scaled[i], x[i] * 0.5f);
  }
  std::vector<float> part(x.begin() + 4096, x.begin() + 4105);  // any split gives the same values
  SoftCap(part.data(), 9, 30.0f, nullptr);
  ASSERT_TRUE(BitEqual(part.data(), capped.data() + 4096, 9));
}

TEST_P(KernelPathTest, RopeMatchesReference) {
  const int64_t max_pos = 50;
  for (int64_t head_dim : {64, 10, 128}) {
    for (int64_t rot_dim : {head_dim, head_dim / 2 & ~int64_t{1}}) {
      const int64_t tokens = 5, heads = 3, stride = heads * head_dim + 7;
      auto cs = std::vector<float>(max_pos * rot_dim);
      for (int64_t p = 0; p < max_pos; ++p) {
        for (int64_t i = 0; i < rot_dim / 2; ++i) {
          const double th = p * std::pow(10000.0, -2.0 * i / rot_dim);
          cs[p * rot_dim + i] = static_cast<float>(std::cos(th));
          cs[p * rot_dim + rot_dim / 2 + i] = static_cast<float>(std::sin(th));
        }
      }
      const std::vector<int32_t> pos = {0, 7, 49, 3, 3};
      const auto x0 = RandomVec(tokens * stride, 77);
      auto x = x0;
      ThreadPool pool(2);
      Rope(x.data(), tokens, heads, head_dim, stride, rot_dim, pos.data(), cs.data(), &pool);
      const int64_t half = rot_dim / 2;
      for (int64_t t = 0; t < tokens; ++t) {
        for (int64_t h = 0; h < heads; ++h) {
          const float* a = x0.data() + t * stride + h * head_dim;
          const float* b = x.data() + t * stride + h * head_dim;
          const float* c = cs.data() + pos[t] * rot_dim;
          for (int64_t i = 0; i < head_dim; ++i) {
            double ref = a[i];
            if (i < half) ref = double(a[i]) * c[i] - double(a[i + half]) * c[half + i];
            if (i >= half && i < rot_dim)
              ref = double(a[i]) * c[i - half] + double(a[i - half]) * c[i];
            ASSERT_NEAR(b[i], ref, 1e-6 * (std::fabs(a[i]) + 1)) << t << " " << h << " " << i;
          }
        }
        for (int64_t i = heads * head_dim; i < stride; ++i)  // padding untouched
          ASSERT_EQ(x[t * stride + i], x0[t * stride + i]);
      }
    }
  }
}

TEST_P(KernelPathTest, EmbeddingAndConvert) {
  const int64_t vocab = 11, dim = 21;
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    Weights table = MakeWeights(type, vocab * dim, 31);
    const std::vector<int32_t> ids = {3, 0, 10, 3};
    std::vector<float> out(ids.size() * dim);
    Embedding(table.bytes.data(), type, dim, ids.data(), ids.size(), out.data(), nullptr);
    for (size_t t = 0; t < ids.size(); ++t) {
      ASSERT_TRUE(BitEqual(out.data() + t * dim, table.values.data() + ids[t] * dim, dim));
    }
    std::vector<float> conv(vocab * dim);
    ConvertToF32(table.bytes.data(), type, vocab * dim, conv.data());
    ASSERT_TRUE(BitEqual(conv.data(), table.values.data(), vocab * dim));
  }
  // Every f16 bit pattern (subnormals, inf, NaN) against the portable converter.
  std::vector<uint16_t> all(65536);
  std::iota(all.begin(), all.end(), 0);
  std::vector<float> f(all.size());
  ConvertToF32(all.data(), DType::kF16, all.size(), f.data());
  for (uint32_t i = 0; i < 65536; ++i) {
    const float ref = F16ToF32(static_cast<uint16_t>(i));
    if (std::isnan(ref)) {
      ASSERT_TRUE(std::isnan(f[i])) << i;
    } else {
      ASSERT_EQ(std::memcmp(&f[i], &ref, 4), 0) << i;
    }
  }
}

TEST(KernelsTest, WriteKvScattersToSlots) {
  const int64_t kv_heads = 2, hd = 3, row = kv_heads * hd, slots = 10;
  const auto k = RandomVec(3 * 8, 1), v = RandomVec(3 * 9, 2);
  std::vector<float> kc(slots * row, 0.0f), vc(slots * row, 0.0f);
  const std::vector<int64_t> map = {7, -1, 2};
  WriteKv(k.data(), 8, v.data(), 9, 3, kv_heads, hd, map.data(), kc.data(), vc.data());
  for (int64_t s = 0; s < slots; ++s) {
    for (int64_t i = 0; i < row; ++i) {
      const float ek = s == 7 ? k[i] : s == 2 ? k[16 + i] : 0.0f;
      const float ev = s == 7 ? v[i] : s == 2 ? v[18 + i] : 0.0f;
      ASSERT_EQ(kc[s * row + i], ek) << s << " " << i;
      ASSERT_EQ(vc[s * row + i], ev) << s << " " << i;
    }
  }
}

TEST(KernelsTest, CpuFeaturesAndOverride) {
  const CpuFeatures& f = GetCpuFeatures();
  const bool has = f.avx2 && f.fma && f.f16c;
  EXPECT_TRUE(SetUseAvx2ForTesting(false));
  EXPECT_FALSE(UseAvx2());
  EXPECT_EQ(SetUseAvx2ForTesting(true), has);
  EXPECT_EQ(UseAvx2(), has);
  ClearUseAvx2ForTesting();
  if (!has) {
    EXPECT_FALSE(UseAvx2());
  }
}

// ---------------------------------------------------------------- Attention

struct AttnConfig {
  int64_t q_heads, kv_heads, head_dim, block_size, window;
  float softcap = 0.0f;  // attention logit soft-capping (Gemma 2)
  bool sinks = false;    // a learned logit per q head in the denominator (gpt-oss)
};

// Two sequences with shuffled, non-contiguous block tables over one random cache,
// queries at positions in the middle of blocks, interleaved across sequences.
struct AttnCase {
  AttnConfig c;
  int64_t num_blocks = 64, max_blocks = 0, q_stride = 0;
  std::vector<float> k_cache, v_cache, q, sinks;
  std::vector<int32_t> tables, positions, token_to_seq;

  explicit AttnCase(const AttnConfig& cfg) : c(cfg) {
    const int64_t lens[2] = {37, 300};
    max_blocks = (lens[1] + c.block_size - 1) / c.block_size + 1;
    const int64_t row = c.kv_heads * c.head_dim;
    num_blocks = 2 * max_blocks + 3;
    k_cache = RandomVec(num_blocks * c.block_size * row, 100);
    v_cache = RandomVec(num_blocks * c.block_size * row, 101);
    std::vector<int32_t> ids(num_blocks);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
    tables.assign(2 * max_blocks, -1);
    int64_t next = 0;
    for (int s = 0; s < 2; ++s) {
      for (int64_t b = 0; b < (lens[s] + c.block_size - 1) / c.block_size; ++b)
        tables[s * max_blocks + b] = ids[next++];
    }
    const int32_t seq[] = {0, 1, 0, 0, 1, 0, 1, 0};
    const int32_t pos[] = {30, 299, 31, 32, 150, 36, 12, 0};
    token_to_seq.assign(seq, seq + 8);
    positions.assign(pos, pos + 8);
    q_stride = c.q_heads * c.head_dim + 5;
    q = RandomVec(8 * q_stride, 102);
    // Sinks around the scores' range: some dominate a head's softmax, some barely count.
    if (c.sinks) {
      sinks = RandomVec(c.q_heads, 103);
      for (size_t h = 0; h < sinks.size(); ++h) sinks[h] *= h % 2 ? 4.0f : 0.5f;
    }
  }
  int64_t tokens() const { return static_cast<int64_t>(positions.size()); }

  PagedAttentionArgs Args(int64_t t0, int64_t nt, float* out) const {
    PagedAttentionArgs a;
    a.q = q.data() + t0 * q_stride;
    a.q_stride = q_stride;
    a.k_cache = k_cache.data();
    a.v_cache = v_cache.data();
    a.num_tokens = nt;
    a.num_q_heads = c.q_heads;
    a.num_kv_heads = c.kv_heads;
    a.head_dim = c.head_dim;
    a.block_size = c.block_size;
    a.positions = positions.data() + t0;
    a.token_to_seq = token_to_seq.data() + t0;
    a.block_tables = tables.data();
    a.max_blocks_per_seq = max_blocks;
    a.sliding_window = c.window;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    a.softcap = c.softcap;
    a.sinks = c.sinks ? sinks.data() : nullptr;
    a.out = out;
    return a;
  }

  // Double-precision reference for (token t, head h); also returns sum_j p_j |v_j|.
  void Reference(int64_t t, int64_t h, std::vector<double>* out, std::vector<double>* mag) const {
    const int64_t hd = c.head_dim, row = c.kv_heads * hd, p = positions[t];
    const int64_t lo = c.window > 0 ? std::max<int64_t>(0, p - c.window + 1) : 0;
    const int64_t kvh = h / (c.q_heads / c.kv_heads);
    const float* qh = q.data() + t * q_stride + h * hd;
    std::vector<double> sc;
    std::vector<const float*> vs;
    for (int64_t pos = lo; pos <= p; ++pos) {
      const int64_t blk = tables[token_to_seq[t] * max_blocks + pos / c.block_size];
      const int64_t base = (blk * c.block_size + pos % c.block_size) * row + kvh * hd;
      double s = 0;
      for (int64_t d = 0; d < hd; ++d) s += static_cast<double>(qh[d]) * k_cache[base + d];
      s /= std::sqrt(static_cast<double>(hd));
      if (c.softcap > 0) s = c.softcap * std::tanh(s / c.softcap);
      sc.push_back(s);
      vs.push_back(v_cache.data() + base);
    }
    double mx = *std::max_element(sc.begin(), sc.end());
    if (c.sinks) mx = std::max(mx, static_cast<double>(sinks[h]));
    double sum = 0;
    for (double& s : sc) sum += (s = std::exp(s - mx));
    if (c.sinks) sum += std::exp(sinks[h] - mx);
    out->assign(hd, 0.0);
    mag->assign(hd, 0.0);
    for (size_t j = 0; j < sc.size(); ++j) {
      for (int64_t d = 0; d < hd; ++d) {
        (*out)[d] += sc[j] / sum * vs[j][d];
        (*mag)[d] += sc[j] / sum * std::fabs(vs[j][d]);
      }
    }
  }
};

const AttnConfig kAttnConfigs[] = {{4, 2, 64, 16, 0},  {6, 2, 13, 5, 0},  {8, 8, 128, 16, 0},
                                   {4, 1, 20, 4, 7},   {2, 2, 64, 16, 20}, {14, 2, 64, 16, 0},
                                   {3, 3, 7, 3, 0},    {2, 1, 72, 8, 1},
                                   {4, 2, 64, 16, 0, 0.3f}, {3, 1, 13, 5, 20, 0.2f},
                                   {8, 2, 64, 16, 0, 0.0f, true}, {6, 2, 13, 5, 7, 0.0f, true}};

TEST_P(KernelPathTest, PagedAttentionMatchesReference) {
  ThreadPool pool(2);
  for (const AttnConfig& cfg : kAttnConfigs) {
    AttnCase ac(cfg);
    const int64_t hd = cfg.head_dim;
    std::vector<float> out(ac.tokens() * cfg.q_heads * hd, -1.0f);
    PagedAttention(ac.Args(0, ac.tokens(), out.data()), &pool);
    std::vector<double> ref, mag;
    for (int64_t t = 0; t < ac.tokens(); ++t) {
      for (int64_t h = 0; h < cfg.q_heads; ++h) {
        ac.Reference(t, h, &ref, &mag);
        for (int64_t d = 0; d < hd; ++d) {
          ASSERT_NEAR(out[(t * cfg.q_heads + h) * hd + d], ref[d], 1e-5 * mag[d] + 1e-6)
              << "cfg hd=" << hd << " window=" << cfg.window << " t=" << t << " h=" << h;
        }
      }
    }
  }
}

// Each token's output alone == inside the batch == with 2 threads, bitwise.
TEST_P(KernelPathTest, PagedAttentionIsBatchInvariant) {
  ThreadPool pool(2);
  for (const AttnConfig& cfg : kAttnConfigs) {
    AttnCase ac(cfg);
    const int64_t per_token = cfg.q_heads * cfg.head_dim;
    std::vector<float> a(ac.tokens() * per_token), b(a.size()), one(per_token);
    PagedAttention(ac.Args(0, ac.tokens(), a.data()), nullptr);
    PagedAttention(ac.Args(0, ac.tokens(), b.data()), &pool);
    ASSERT_TRUE(BitEqual(a.data(), b.data(), a.size()));
    for (int64_t t = 0; t < ac.tokens(); ++t) {
      PagedAttention(ac.Args(t, 1, one.data()), t % 2 ? &pool : nullptr);
      ASSERT_TRUE(BitEqual(one.data(), a.data() + t * per_token, per_token)) << t;
    }
    std::vector<float> c(a.size());  // split into two calls of 3 and 5 tokens
    PagedAttention(ac.Args(0, 3, c.data()), &pool);
    PagedAttention(ac.Args(3, ac.tokens() - 3, c.data() + 3 * per_token), &pool);
    ASSERT_TRUE(BitEqual(a.data(), c.data(), a.size()));
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, KernelPathTest, ::testing::Bool(), PathName);

}  // namespace
}  // namespace tessera::kernels::cpu
