// The MoE kernels (kernels/cuda/moe_*.cu, sigmoid_gate_add.cu) against plain
// host loops written here: softmax + top-k routing, the permutation plan, the
// grouped expert GEMM (bitwise against the contract's own lane-chain + xor-tree
// order, and within an error bound of a double sum), the weighted combine
// (bitwise fmaf chain in slot order), expert counts and the sigmoid gate.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "kernels/cuda/moe_combine.cuh"
#include "kernels/cuda/moe_count.cuh"
#include "kernels/cuda/moe_grouped_linear.cuh"
#include "kernels/cuda/moe_plan.cuh"
#include "kernels/cuda/moe_route.cuh"
#include "kernels/cuda/sigmoid_gate_add.cuh"
#include "tests/cuda/cuda_test_util.h"

namespace tessera::kernels {
namespace {

using cuda::ElemType;
using cuda_test::BitwiseEqual;
using cuda_test::DeviceBuffer;
using cuda_test::RandomNormal;

// --- routing -----------------------------------------------------------------

struct HostRoute {
  std::vector<int32_t> ids;
  std::vector<double> weights;
};

// Softmax in double, experts by descending probability, ties to the lower id.
HostRoute RouteOnHost(const std::vector<float>& logits, int64_t tokens, int64_t experts, int64_t k, bool renorm) {
  HostRoute r;
  for (int64_t t = 0; t < tokens; ++t) {
    const float* l = &logits[t * experts];
    const double mx = *std::max_element(l, l + experts);
    std::vector<double> p(experts);
    double sum = 0;
    for (int64_t e = 0; e < experts; ++e) sum += p[e] = std::exp(l[e] - mx);
    for (double& v : p) v /= sum;
    std::vector<int32_t> order(experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
    double ks = 0;
    for (int64_t j = 0; j < k; ++j) ks += p[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      r.ids.push_back(order[j]);
      r.weights.push_back(renorm ? p[order[j]] / ks : p[order[j]]);
    }
  }
  return r;
}

TEST(CudaMoeKernelsTest, TopKSoftmaxMatchesHostWithTiesToLowerId) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  struct Case {
    int64_t tokens, experts, k;
  };
  for (const Case c : {Case{9, 8, 2}, Case{37, 60, 8}, Case{5, 130, 1}, Case{3, cuda::kMoeMaxExperts, 4},
                       Case{2, 6, 6}}) {
    for (bool renorm : {false, true}) {
      SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " experts " + std::to_string(c.experts) + " k " +
                   std::to_string(c.k) + " renorm " + std::to_string(renorm));
      std::vector<float> logits = RandomNormal(c.tokens * c.experts, 10 + c.experts, 2.0f);
      // Exact ties: token 0 has three experts at its maximum (the lowest id
      // comes first), token 1 two tied experts in the middle of its ranking.
      const float top = *std::max_element(logits.begin(), logits.begin() + c.experts) + 1.0f;
      for (int64_t e : {c.experts - 1, c.experts / 2, int64_t{1}}) logits[e] = top;
      logits[c.experts + c.experts - 2] = logits[c.experts + 0] = 0.25f;
      const HostRoute want = RouteOnHost(logits, c.tokens, c.experts, c.k, renorm);
      DeviceBuffer<float> dl(logits), dw(c.tokens * c.k);
      DeviceBuffer<int32_t> di(c.tokens * c.k);
      ASSERT_EQ(cuda::MoeTopKSoftmax(dl.get(), c.tokens, c.experts, c.k, renorm, di.get(), dw.get(), nullptr),
                cudaSuccess);
      const std::vector<int32_t> ids = di.Download();
      const std::vector<float> w = dw.Download();
      EXPECT_EQ(ids, want.ids);
      for (size_t i = 0; i < w.size(); ++i) {
        EXPECT_NEAR(w[i], want.weights[i], 2e-6 * std::max(1.0, want.weights[i])) << "slot " << i;
      }
      // Token 0's three tied maxima come in id order.
      if (c.k >= 3) {
        EXPECT_EQ((std::vector<int32_t>{ids[0], ids[1], ids[2]}),
                  (std::vector<int32_t>{1, static_cast<int32_t>(c.experts / 2), static_cast<int32_t>(c.experts - 1)}));
      }
      // A token routed alone: the same bits as inside the batch.
      const int64_t t = c.tokens - 1;
      DeviceBuffer<float> w1(c.k);
      DeviceBuffer<int32_t> i1(c.k);
      ASSERT_EQ(cuda::MoeTopKSoftmax(dl.get() + t * c.experts, 1, c.experts, c.k, renorm, i1.get(), w1.get(), nullptr),
                cudaSuccess);
      EXPECT_TRUE(BitwiseEqual(w1.Download().data(), w.data() + t * c.k, c.k));
      EXPECT_EQ(i1.Download(), std::vector<int32_t>(ids.begin() + t * c.k, ids.end()));
    }
  }
}

TEST(CudaMoeKernelsTest, TopKSoftmaxRejectsBadShapes) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  DeviceBuffer<float> buf(std::vector<float>(8, 0.f));
  DeviceBuffer<int32_t> ids(8);
  EXPECT_EQ(cuda::MoeTopKSoftmax(buf.get(), 1, 4, 5, false, ids.get(), buf.get(), nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::MoeTopKSoftmax(buf.get(), 1, cuda::kMoeMaxExperts + 1, 1, false, ids.get(), buf.get(), nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::MoeTopKSoftmax(buf.get(), 0, 4, 2, false, ids.get(), buf.get(), nullptr), cudaSuccess);
}

// --- permutation plan ----------------------------------------------------------

struct HostPlan {
  std::vector<int32_t> plan, pair_row, row_token;
};

HostPlan PlanOnHost(const std::vector<int32_t>& ids, int64_t k, int64_t experts, int64_t tile_rows) {
  const int64_t n = static_cast<int64_t>(ids.size());
  HostPlan h;
  h.plan.assign(2 * (experts + 1), 0);
  h.pair_row.assign(n, -1);
  h.row_token.assign(n, 0);
  int32_t row = 0, tile = 0;
  for (int64_t e = 0; e < experts; ++e) {
    h.plan[e] = row;
    h.plan[experts + 1 + e] = tile;
    const int32_t first = row;
    for (int64_t i = 0; i < n; ++i) {
      if (ids[i] != e) continue;
      h.pair_row[i] = row;
      h.row_token[row++] = static_cast<int32_t>(i / k);
    }
    tile += static_cast<int32_t>((row - first + tile_rows - 1) / tile_rows);
  }
  h.plan[experts] = row;
  h.plan[2 * experts + 1] = tile;
  return h;
}

TEST(CudaMoeKernelsTest, PlanGroupsRowsByExpertStably) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  struct Case {
    int64_t tokens, k, experts;
    bool invalid;
  };
  for (const Case c : {Case{1, 1, 1, false}, Case{13, 2, 6, false}, Case{70, 4, 40, true}, Case{5, 3, 300, true}}) {
    SCOPED_TRACE("tokens " + std::to_string(c.tokens) + " k " + std::to_string(c.k) + " experts " +
                 std::to_string(c.experts));
    const int64_t n = c.tokens * c.k;
    // Skewed: half the pairs go to expert 2 % E, the rest spread; the last
    // experts get nothing. With `invalid`, a few ids are out of range.
    std::mt19937 rng(static_cast<uint32_t>(n + c.experts));
    std::vector<int32_t> ids(n);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t spread = std::max<int64_t>(1, c.experts * 2 / 3);
      ids[i] = static_cast<int32_t>(rng() % 2 == 0 ? 2 % c.experts : rng() % spread);
    }
    if (c.invalid) {
      ids[1] = -1;
      ids[n - 1] = static_cast<int32_t>(c.experts);
    }
    const HostPlan want = PlanOnHost(ids, c.k, c.experts, cuda::kMoeTileRows);
    DeviceBuffer<int32_t> dids(ids), plan(cuda::MoePlanInts(c.experts)), pair_row(n),
        row_token(std::vector<int32_t>(n, 12345));  // stale rows must be reset
    ASSERT_EQ(cuda::MoePlan(dids.get(), n, c.k, c.experts, cuda::kMoeTileRows, plan.get(), pair_row.get(),
                            row_token.get(), nullptr),
              cudaSuccess);
    EXPECT_EQ(plan.Download(), want.plan);
    EXPECT_EQ(pair_row.Download(), want.pair_row);
    EXPECT_EQ(row_token.Download(), want.row_token);
    EXPECT_LE(want.plan[2 * c.experts + 1], cuda::MoeMaxTiles(n, c.experts, cuda::kMoeTileRows));
  }
}

// --- grouped GEMM ------------------------------------------------------------

// The exact value the kernel computes: lane l chains k = 8l + 256s + i (ascending)
// with fmaf, then the xor butterfly as lane 0 sees it.
float LaneTreeDot(const float* x, const float* w, int64_t k) {
  float lane[32];
  for (int l = 0; l < 32; ++l) {
    float acc = 0.f;
    for (int64_t k0 = 8 * l; k0 < k; k0 += 256) {
      for (int64_t i = k0; i < std::min(k0 + 8, k); ++i) acc = std::fmaf(x[i], w[i], acc);
    }
    lane[l] = acc;
  }
  for (int off = 16; off > 0; off >>= 1) {
    float next[32];
    for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ off];
    std::memcpy(lane, next, sizeof(lane));
  }
  return lane[0];
}

// Bytes of f32 values stored as t, and the values they hold.
std::vector<uint8_t> Encode(std::vector<float>* v, ElemType t) {
  std::vector<uint8_t> b(v->size() * (t == ElemType::kF32 ? 4 : 2));
  for (size_t i = 0; i < v->size(); ++i) {
    if (t == ElemType::kF32) {
      std::memcpy(&b[4 * i], &(*v)[i], 4);
      continue;
    }
    const uint16_t h = t == ElemType::kF16 ? F32ToF16((*v)[i]) : F32ToBf16((*v)[i]);
    (*v)[i] = t == ElemType::kF16 ? F16ToF32(h) : Bf16ToF32(h);
    std::memcpy(&b[2 * i], &h, 2);
  }
  return b;
}

TEST(CudaMoeKernelsTest, GroupedLinearMatchesLaneChainBitwise) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  struct Case {
    int64_t experts, k, n_part, parts;
    ElemType type;
    bool vec;
  };
  const Case cases[] = {{5, 64, 12, 2, ElemType::kBF16, true}, {5, 40, 9, 1, ElemType::kF32, false},
                        {3, 300, 7, 2, ElemType::kF16, false}, {4, 264, 10, 1, ElemType::kF32, true},
                        {3, 520, 5, 2, ElemType::kBF16, true}};
  for (const Case& c : cases) {
    SCOPED_TRACE("experts " + std::to_string(c.experts) + " k " + std::to_string(c.k) + " vec " +
                 std::to_string(c.vec));
    // Skewed routing of 23 tokens, top-1: expert 0 gets 19 rows (3 tiles), expert
    // experts-1 none.
    std::vector<int32_t> ids(23, 0);
    for (int i = 0; i < 4; ++i) ids[5 * i + 2] = static_cast<int32_t>(1 + i % (c.experts - 2));
    const int64_t n = static_cast<int64_t>(ids.size());
    const HostPlan hp = PlanOnHost(ids, 1, c.experts, cuda::kMoeTileRows);
    DeviceBuffer<int32_t> dids(ids), plan(cuda::MoePlanInts(c.experts)), pair_row(n), row_token(n);
    ASSERT_EQ(cuda::MoePlan(dids.get(), n, 1, c.experts, cuda::kMoeTileRows, plan.get(), pair_row.get(),
                            row_token.get(), nullptr),
              cudaSuccess);
    const std::vector<float> x = RandomNormal(n * c.k, 50 + c.k);
    std::vector<std::vector<float>> w(c.experts * c.parts);
    std::vector<DeviceBuffer<uint8_t>> dw;
    std::vector<const void*> table;
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] = RandomNormal(c.n_part * c.k, 60 + static_cast<uint32_t>(i), 0.3f);
      dw.emplace_back(Encode(&w[i], c.type));
      table.push_back(dw.back().get());
    }
    std::vector<uint8_t> table_bytes(table.size() * sizeof(void*));
    std::memcpy(table_bytes.data(), table.data(), table_bytes.size());
    DeviceBuffer<uint8_t> dtable(table_bytes);
    DeviceBuffer<float> dx(x), dy(std::vector<float>(n * c.parts * c.n_part, -3.f));
    cuda::MoeGroupedLinearArgs a;
    a.x = dx.get();
    a.k = c.k;
    a.weights = reinterpret_cast<const void* const*>(dtable.get());
    a.w_type = c.type;
    a.parts = c.parts;
    a.n_part = c.n_part;
    a.num_experts = c.experts;
    a.plan = plan.get();
    a.max_tiles = cuda::MoeMaxTiles(n, c.experts, cuda::kMoeTileRows);
    a.vector_loads = c.vec;
    a.y = dy.get();
    ASSERT_EQ(cuda::MoeGroupedLinear(a, nullptr), cudaSuccess);
    const std::vector<float> y = dy.Download();
    const int64_t cols = c.parts * c.n_part;
    int bad = 0;
    for (int64_t pair = 0; pair < n; ++pair) {
      const int64_t r = hp.pair_row[pair], e = ids[pair];
      for (int64_t col = 0; col < cols && bad < 5; ++col) {
        const std::vector<float>& we = w[e * c.parts + col / c.n_part];
        const float* wr = &we[(col % c.n_part) * c.k];
        const float* xr = &x[r * c.k];
        const float want = LaneTreeDot(xr, wr, c.k);
        double exact = 0, mag = 0;
        for (int64_t i = 0; i < c.k; ++i) {
          exact += static_cast<double>(xr[i]) * wr[i];
          mag += std::fabs(static_cast<double>(xr[i]) * wr[i]);
        }
        const float got = y[r * cols + col];
        if (std::memcmp(&got, &want, 4) != 0 || std::fabs(got - exact) > (c.k + 1) * std::ldexp(1.0, -24) * mag) {
          ADD_FAILURE() << "row " << r << " col " << col << ": " << got << ", want " << want << ", exact " << exact;
          ++bad;
        }
      }
    }
  }
}

// --- combine, counts, gate ---------------------------------------------------

TEST(CudaMoeKernelsTest, CombineSumsSlotsInOrderBitwise) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  const int64_t tokens = 7, k = 3, cols = 300, rows = tokens * k;
  const std::vector<float> y = RandomNormal(rows * cols, 70), w = RandomNormal(tokens * k, 71);
  std::vector<int32_t> pair_row(rows);
  std::iota(pair_row.begin(), pair_row.end(), 0);
  std::shuffle(pair_row.begin(), pair_row.end(), std::mt19937(72));
  pair_row[4] = -1;  // an invalid id's slot adds nothing
  DeviceBuffer<float> dy(y), dw(w), dout(std::vector<float>(tokens * cols, 9.f));
  DeviceBuffer<int32_t> dp(pair_row);
  ASSERT_EQ(cuda::MoeCombine(dy.get(), cols, dp.get(), dw.get(), tokens, k, dout.get(), nullptr), cudaSuccess);
  std::vector<float> want(tokens * cols);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t c = 0; c < cols; ++c) {
      float acc = 0.f;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t r = pair_row[t * k + j];
        if (r >= 0) acc = std::fmaf(w[t * k + j], y[r * cols + c], acc);
      }
      want[t * cols + c] = acc;
    }
  }
  EXPECT_TRUE(BitwiseEqual(dout.Download().data(), want.data(), want.size()));
}

TEST(CudaMoeKernelsTest, CountExpertsAddsToCounts) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  for (int64_t experts : {int64_t{6}, int64_t{5000}}) {  // shared histogram, then global atomics only
    std::mt19937 rng(static_cast<uint32_t>(experts));
    std::vector<int32_t> ids(1000);
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 3 == 0 ? 1 : rng() % (experts + 1));  // some == E
    ids[0] = -2;
    std::vector<int64_t> want(experts);
    for (int64_t e = 0; e < experts; ++e) want[e] = e * 3;
    DeviceBuffer<int64_t> counts(want);
    for (int32_t id : ids) {
      if (id >= 0 && id < experts) ++want[id];
    }
    DeviceBuffer<int32_t> dids(ids);
    ASSERT_EQ(cuda::MoeCountExperts(dids.get(), static_cast<int64_t>(ids.size()), experts, counts.get(), nullptr),
              cudaSuccess);
    EXPECT_EQ(counts.Download(), want);
  }
}

TEST(CudaMoeKernelsTest, SigmoidGateAdd) {
  TESSERA_REQUIRE_CUDA_DEVICE();
  const int64_t rows = 5, dim = 70;
  const std::vector<float> out = RandomNormal(rows * dim, 80), shared = RandomNormal(rows * dim, 81);
  const std::vector<float> gate = {-30.f, -1.5f, 0.f, 2.f, 40.f};
  DeviceBuffer<float> dout(out), dshared(shared), dgate(gate);
  ASSERT_EQ(cuda::SigmoidGateAdd(dout.get(), dshared.get(), dgate.get(), rows, dim, nullptr), cudaSuccess);
  const std::vector<float> got = dout.Download();
  for (int64_t r = 0; r < rows; ++r) {
    const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(gate[r])));
    for (int64_t c = 0; c < dim; ++c) {
      const double want = out[r * dim + c] + s * shared[r * dim + c];
      EXPECT_NEAR(got[r * dim + c], want, 1e-6 * std::max(1.0, std::fabs(want))) << r << "," << c;
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
