// The CUDA backend's MoE ops (Backend::MoeRoute, MoeExperts, MoeCountExperts,
// SigmoidGateAdd) against a float64 host loop written here from the contract in
// engine/backend.h: skewed routing (a hot expert, experts without tokens), every
// expert dtype (quantized ones are dequantized to bf16 on upload), both the
// grouped-kernel and the per-expert cuBLAS path, bitwise batch invariance in the
// deterministic mode, and CUDA-graph capture and replay of a routed layer.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "common/quant.h"
#include "engine/backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_moe.h"
#include "tests/cuda/cuda_test_util.h"

namespace tessera {
namespace {

using cuda_test::BitwiseEqual;
using cuda_test::RandomNormal;

// Backend memory kept alive for the test.
class Mem {
 public:
  explicit Mem(Backend* b) : b_(b) {}
  template <typename T>
  T* Put(const std::vector<T>& v) {
    T* p = Zeros<T>(v.size());
    b_->CopyFromHost(p, v.data(), static_cast<int64_t>(v.size() * sizeof(T)));
    return p;
  }
  template <typename T>
  T* Zeros(size_t n) {
    StatusOr<std::shared_ptr<void>> p = b_->Allocate(static_cast<int64_t>(std::max<size_t>(n, 1) * sizeof(T)));
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    keep_.push_back(*p);
    return static_cast<T*>(keep_.back().get());
  }
  template <typename T>
  std::vector<T> Get(const T* p, size_t n) {
    std::vector<T> out(n);
    b_->CopyToHost(out.data(), p, static_cast<int64_t>(n * sizeof(T)));
    Status s = b_->TakeError();
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }

 private:
  Backend* b_;
  std::vector<std::shared_ptr<void>> keep_;
};

// One MoE layer: host weights in `dtype` and the f32 values the device holds
// (bf16-rounded dequantized values for quantized dtypes).
struct Layer {
  int64_t experts = 6, hidden = 64, inter = 32;
  std::vector<std::vector<float>> gate, up, down;  // values as the device sees them
  MoeExpertWeights device;
};

std::vector<float> DeviceValues(std::vector<float> w, int64_t rows, int64_t cols, DType dtype,
                                std::vector<uint8_t>* bytes) {
  const int64_t row_bytes = DTypeRowBytes(dtype, cols);
  bytes->assign(static_cast<size_t>(rows * row_bytes), 0);
  for (int64_t r = 0; r < rows; ++r) {
    float* src = &w[r * cols];
    uint8_t* dst = bytes->data() + r * row_bytes;
    if (IsQuantized(dtype)) {
      QuantizeRow(src, cols, dtype, dst);
      DequantizeRow(dst, dtype, cols, src);
      for (int64_t c = 0; c < cols; ++c) src[c] = Bf16ToF32(F32ToBf16(src[c]));
      continue;
    }
    for (int64_t c = 0; c < cols; ++c) {
      if (dtype == DType::kF32) {
        std::memcpy(dst + 4 * c, &src[c], 4);
        continue;
      }
      const uint16_t h = dtype == DType::kF16 ? F32ToF16(src[c]) : F32ToBf16(src[c]);
      src[c] = dtype == DType::kF16 ? F16ToF32(h) : Bf16ToF32(h);
      std::memcpy(dst + 2 * c, &h, 2);
    }
  }
  return w;
}

Layer MakeLayer(Backend* b, DType dtype, uint32_t seed) {
  Layer l;
  l.device.num_experts = l.experts;
  l.device.hidden = l.hidden;
  l.device.inter = l.inter;
  for (int64_t e = 0; e < l.experts; ++e) {
    struct Part {
      std::vector<std::vector<float>>* values;
      std::vector<WeightView>* views;
      int64_t rows, cols;
    };
    for (const Part& p : {Part{&l.gate, &l.device.gate, l.inter, l.hidden}, Part{&l.up, &l.device.up, l.inter, l.hidden},
                          Part{&l.down, &l.device.down, l.hidden, l.inter}}) {
      std::vector<uint8_t> bytes;
      p.values->push_back(DeviceValues(RandomNormal(p.rows * p.cols, seed++, 0.3f), p.rows, p.cols, dtype, &bytes));
      StatusOr<WeightView> w = b->UploadWeight(WeightView{bytes.data(), dtype, p.rows, p.cols});
      EXPECT_TRUE(w.ok()) << w.status().ToString();
      p.views->push_back(w.ok() ? *w : WeightView{});
    }
  }
  return l;
}

// The contract in float64: out[t] = sum_j w[t, j] * down_e(silu(gate_e x) * up_e x).
std::vector<double> ExpertsOnHost(const Layer& l, const std::vector<float>& x, int64_t tokens,
                                  const std::vector<int32_t>& ids, const std::vector<float>& w, int64_t k) {
  std::vector<double> out(tokens * l.hidden, 0.0);
  std::vector<double> h(l.inter);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[t * k + j];
      for (int64_t i = 0; i < l.inter; ++i) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < l.hidden; ++c) {
          g += static_cast<double>(l.gate[e][i * l.hidden + c]) * x[t * l.hidden + c];
          u += static_cast<double>(l.up[e][i * l.hidden + c]) * x[t * l.hidden + c];
        }
        h[i] = g / (1.0 + std::exp(-g)) * u;
      }
      for (int64_t c = 0; c < l.hidden; ++c) {
        double d = 0;
        for (int64_t i = 0; i < l.inter; ++i) d += static_cast<double>(l.down[e][c * l.inter + i]) * h[i];
        out[t * l.hidden + c] += w[t * k + j] * d;
      }
    }
  }
  return out;
}

double MaxRelError(const std::vector<float>& got, const std::vector<double>& want) {
  double scale = 1e-6, err = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err = std::max(err, std::fabs(got[i] - want[i]));
  }
  return err / scale;
}

// Skewed top-2 routing: expert 0 is in nearly every token, experts 4 and 5 in none.
void SkewedRouting(int64_t tokens, std::vector<int32_t>* ids, std::vector<float>* w) {
  ids->clear();
  w->clear();
  for (int64_t t = 0; t < tokens; ++t) {
    ids->push_back(t % 5 == 4 ? 1 : 0);
    ids->push_back(static_cast<int32_t>(2 + t % 2));
    w->push_back(0.6f + 0.01f * static_cast<float>(t % 7));
    w->push_back(0.4f - 0.01f * static_cast<float>(t % 7));
  }
}

class CudaMoeBackendTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    TESSERA_REQUIRE_CUDA_DEVICE();
    CudaBackendOptions o;
    o.deterministic = GetParam();
    StatusOr<std::unique_ptr<Backend>> g = MakeCudaBackend(o);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    gpu_ = std::move(*g);
  }
  std::unique_ptr<Backend> gpu_;
};

TEST_P(CudaMoeBackendTest, CheckMoeIsOk) { EXPECT_TRUE(gpu_->CheckMoe().ok()); }

// 13 tokens (26 rows) take the grouped kernel in both modes; 56 tokens (112 rows
// >= 16 per expert) take per-expert cuBLAS GEMMs in the cuBLAS mode, where
// 16-bit weights multiply x and the activations rounded to their type.
TEST_P(CudaMoeBackendTest, ExpertsMatchHostWithSkewedRouting) {
  const bool det = GetParam();
  uint32_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0}) {
    const Layer l = MakeLayer(gpu_.get(), dtype, seed);
    seed += 100;
    for (int64_t tokens : {int64_t{13}, int64_t{56}}) {
      const bool via_cublas = !det && tokens == 56;
      const bool rounded = via_cublas && dtype != DType::kF32;
      const double tol = rounded ? 1.5e-2 : 1e-5;
      std::vector<int32_t> ids;
      std::vector<float> w;
      SkewedRouting(tokens, &ids, &w);
      const std::vector<float> x = RandomNormal(tokens * l.hidden, seed++);
      Mem mem(gpu_.get());
      float* out = mem.Put(std::vector<float>(tokens * l.hidden, 5.f));
      gpu_->MoeExperts(mem.Put(x), tokens, mem.Put(ids), mem.Put(w), 2, l.device, out);
      const double err = MaxRelError(mem.Get(out, tokens * l.hidden), ExpertsOnHost(l, x, tokens, ids, w, 2));
      std::printf("  MoeExperts %-5s tokens=%-3lld %-13s max rel error %.3g (tolerance %.3g)\n",
                  std::string(DTypeName(dtype)).c_str(),
                  static_cast<long long>(tokens), via_cublas ? "(cuBLAS)" : "(grouped)", err, tol);
      EXPECT_LE(err, tol) << DTypeName(dtype) << " tokens " << tokens;
    }
  }
}

// Route + experts: a token's output is bitwise the same alone, in a batch of 20
// and in a batch of 5 at another position (deterministic mode).
TEST_P(CudaMoeBackendTest, DeterministicRouteAndExpertsAreBatchInvariant) {
  if (!GetParam()) GTEST_SKIP() << "batch invariance is the deterministic mode's promise";
  const Layer l = MakeLayer(gpu_.get(), DType::kBF16, 500);
  const int64_t tokens = 20, k = 2, e = l.experts, h = l.hidden;
  std::vector<float> logits = RandomNormal(tokens * e, 501, 2.0f);
  for (int64_t t = 0; t < tokens; ++t) logits[t * e] += 2.0f;  // a hot expert
  const std::vector<float> x = RandomNormal(tokens * h, 502);
  Mem mem(gpu_.get());
  const float* dx = mem.Put(x);
  const float* dl = mem.Put(logits);
  auto run = [&](int64_t first, int64_t count) {
    int32_t* ids = mem.Zeros<int32_t>(count * k);
    float* w = mem.Zeros<float>(count * k);
    float* out = mem.Zeros<float>(count * h);
    MoeRouteParams route;
    route.num_experts = e;
    route.top_k = k;
    route.renormalize = true;
    gpu_->MoeRoute(dl + first * e, count, route, ids, w);
    gpu_->MoeExperts(dx + first * h, count, ids, w, k, l.device, out);
    return mem.Get(out, count * h);
  };
  const std::vector<float> all = run(0, tokens), five = run(9, 5);
  for (int64_t t : {int64_t{0}, int64_t{11}, int64_t{19}}) {
    EXPECT_TRUE(BitwiseEqual(run(t, 1).data(), all.data() + t * h, h)) << "token " << t << " alone";
  }
  EXPECT_TRUE(BitwiseEqual(five.data(), all.data() + 9 * h, 5 * h)) << "tokens 9..13 as a batch of 5";
}

// A routed layer captured as a CUDA graph (after an eager run of the shape)
// replays on new inputs with the same bits as an eager run; a layer first seen
// inside a capture fails with a clear error instead of allocating.
TEST_P(CudaMoeBackendTest, GraphCaptureAndReplay) {
  if (!gpu_->SupportsGraphs()) GTEST_SKIP() << "graphs off";
  const Layer l = MakeLayer(gpu_.get(), DType::kBF16, 700);
  const int64_t tokens = 4, k = 2, e = l.experts, h = l.hidden;
  Mem mem(gpu_.get());
  float* x = mem.Zeros<float>(tokens * h);
  float* logits = mem.Zeros<float>(tokens * e);
  int32_t* ids = mem.Zeros<int32_t>(tokens * k);
  float* w = mem.Zeros<float>(tokens * k);
  float* out = mem.Zeros<float>(tokens * h);
  MoeRouteParams route;
  route.num_experts = e;
  route.top_k = k;
  auto layer = [&]() {
    gpu_->MoeRoute(logits, tokens, route, ids, w);
    gpu_->MoeExperts(x, tokens, ids, w, k, l.device, out);
  };
  auto inputs = [&](uint32_t s) {
    gpu_->CopyFromHost(x, RandomNormal(tokens * h, s).data(), tokens * h * 4);
    gpu_->CopyFromHost(logits, RandomNormal(tokens * e, s + 1, 2.0f).data(), tokens * e * 4);
  };
  inputs(710);
  layer();  // eager: builds the expert table and the scratch
  ASSERT_TRUE(gpu_->TakeError().ok());
  ASSERT_TRUE(gpu_->BeginCapture().ok());
  layer();
  StatusOr<int64_t> graph = gpu_->EndCapture();
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  inputs(720);
  ASSERT_TRUE(gpu_->Replay(*graph).ok());
  const std::vector<float> replayed = mem.Get(out, tokens * h);
  layer();
  const std::vector<float> eager = mem.Get(out, tokens * h);
  EXPECT_TRUE(BitwiseEqual(replayed.data(), eager.data(), tokens * h));
  gpu_->ReleaseGraph(*graph);

  const Layer fresh = MakeLayer(gpu_.get(), DType::kBF16, 800);
  ASSERT_TRUE(gpu_->BeginCapture().ok());
  gpu_->MoeExperts(x, tokens, ids, w, k, fresh.device, out);
  StatusOr<int64_t> bad = gpu_->EndCapture();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("graph capture"), std::string::npos) << bad.status().ToString();
}

TEST_P(CudaMoeBackendTest, MisshapenExpertWeightIsReportedByName) {
  Layer l = MakeLayer(gpu_.get(), DType::kBF16, 900);
  l.device.down[3].cols = l.inter + 1;
  Mem mem(gpu_.get());
  const std::vector<int32_t> ids = {3, 0};
  gpu_->MoeExperts(mem.Zeros<float>(l.hidden), 1, mem.Put(ids), mem.Put(std::vector<float>{0.5f, 0.5f}), 2, l.device,
                   mem.Zeros<float>(l.hidden));
  const Status s = gpu_->TakeError();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("expert 3 down"), std::string::npos) << s.ToString();
}

TEST_P(CudaMoeBackendTest, CountExpertsAndSigmoidGateAdd) {
  Mem mem(gpu_.get());
  const std::vector<int32_t> ids = {0, 2, 2, 5, 2, 0};
  int64_t* counts = mem.Put(std::vector<int64_t>{1, 0, 0, 0, 0, 7});
  gpu_->MoeCountExperts(mem.Put(ids), static_cast<int64_t>(ids.size()), 6, counts);
  EXPECT_EQ(mem.Get(counts, 6), (std::vector<int64_t>{3, 0, 3, 0, 0, 8}));

  const std::vector<float> out = RandomNormal(3 * 10, 1), shared = RandomNormal(3 * 10, 2);
  const std::vector<float> gate = {-2.f, 0.f, 3.f};
  float* d = mem.Put(out);
  gpu_->SigmoidGateAdd(d, mem.Put(shared), mem.Put(gate), 3, 10);
  const std::vector<float> got = mem.Get(d, 30);
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t c = 0; c < 10; ++c) {
      const double want = out[r * 10 + c] + shared[r * 10 + c] / (1.0 + std::exp(-static_cast<double>(gate[r])));
      EXPECT_NEAR(got[r * 10 + c], want, 1e-6);
    }
  }
}

// A batch run in chunks (a scratch budget of a few tokens) gives the bits of
// the one-chunk run, on the grouped path.
TEST(CudaMoeChunkTest, ChunkedBatchEqualsOneChunkBitwise) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  CudaBackendOptions o;
  o.deterministic = true;
  StatusOr<std::unique_ptr<Backend>> gpu = MakeCudaBackend(o);
  ASSERT_TRUE(gpu.ok()) << gpu.status().ToString();
  const Layer l = MakeLayer(gpu->get(), DType::kBF16, 1000);
  const int64_t tokens = 13, k = 2;
  std::vector<int32_t> ids;
  std::vector<float> w;
  SkewedRouting(tokens, &ids, &w);
  cuda_test::DeviceBuffer<float> x(RandomNormal(tokens * l.hidden, 1001)), dw(w), one(tokens * l.hidden),
      chunked(tokens * l.hidden);
  cuda_test::DeviceBuffer<int32_t> dids(ids);
  const CudaMoe::Env env{nullptr, nullptr, false};
  CudaMoe whole, small(3 * 2048);  // about 3 tokens of this layer's scratch per chunk
  Status s = whole.Experts(env, x.get(), tokens, dids.get(), dw.get(), k, l.device, one.get());
  ASSERT_TRUE(s.ok()) << s.ToString();
  s = small.Experts(env, x.get(), tokens, dids.get(), dw.get(), k, l.device, chunked.get());
  ASSERT_TRUE(s.ok()) << s.ToString();
  const std::vector<float> a = one.Download(), b = chunked.Download();
  EXPECT_TRUE(BitwiseEqual(a.data(), b.data(), a.size()));
  EXPECT_FALSE(std::all_of(a.begin(), a.end(), [](float v) { return v == 0.f; }));
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaMoeBackendTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Deterministic" : "Cublas"; });

}  // namespace
}  // namespace tessera
