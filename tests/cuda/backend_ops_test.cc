// Op harness in the style of llama.cpp's test-backend-ops: every Backend op runs
// on the CUDA backend and on the CPU backend (the oracle) with fresh random
// inputs; outputs are compared with a tolerance per weight dtype and the max
// normalised error is printed. Inputs go through each backend's own Allocate /
// CopyFromHost and outputs come back through CopyToHost, so the harness also
// exercises the transfers. Skips without a device (the emulator always has one).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "common/quant.h"
#include "engine/backend.h"
#include "engine/cuda/cuda_backend.h"
#include "tests/cuda/cuda_test_util.h"

namespace tessera {
namespace {

using cuda_test::RandomNormal;

// Memory on one backend; keeps every allocation alive for the test.
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
    EXPECT_TRUE(s.ok()) << b_->name() << ": " << s.ToString();
    return out;
  }
  Backend* backend() const { return b_; }

 private:
  Backend* b_;
  std::vector<std::shared_ptr<void>> keep_;
};

// max |a - b| / max(max |b|, 1e-6): error relative to the output's scale.
double MaxRelError(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double scale = 1e-6, err = 0;
  for (float v : b) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return err / scale;
}

void Report(const std::string& op, double err, double tol) {
  std::printf("  %-44s max rel error %.3g (tolerance %.3g)\n", op.c_str(), err, tol);
  EXPECT_LE(err, tol) << op;
}

float RoundBf16(float x) { return Bf16ToF32(F32ToBf16(x)); }

class BackendOpsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    TESSERA_REQUIRE_CUDA_DEVICE();
    CudaBackendOptions o;
    o.deterministic = GetParam();
    StatusOr<std::unique_ptr<Backend>> g = MakeCudaBackend(o);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    gpu_ = std::move(*g);
    cpu_ = MakeCpuBackend({2, false});
  }
  std::unique_ptr<Backend> gpu_, cpu_;
};

// Host weight of `dtype` built from f32 values (kept alive in `storage`).
WeightView HostWeight(const std::vector<float>& w, int64_t rows, int64_t cols, DType dtype,
                      std::vector<uint8_t>* storage) {
  const int64_t row_bytes = DTypeRowBytes(dtype, cols);
  storage->assign(static_cast<size_t>(rows * row_bytes), 0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = &w[r * cols];
    uint8_t* dst = storage->data() + r * row_bytes;
    for (int64_t c = 0; c < cols && !IsQuantized(dtype); ++c) {
      if (dtype == DType::kF32) std::memcpy(dst + 4 * c, &src[c], 4);
      const uint16_t h = dtype == DType::kF16 ? F32ToF16(src[c]) : F32ToBf16(src[c]);
      if (dtype != DType::kF32) std::memcpy(dst + 2 * c, &h, 2);
    }
    if (IsQuantized(dtype)) QuantizeRow(src, cols, dtype, dst);
  }
  return WeightView{storage->data(), dtype, rows, cols};
}

TEST_P(BackendOpsTest, Linear) {
  struct Case {
    DType dtype;
    double tol;
  };
  // bf16/f16: x is rounded to the weight type before the GEMM on the GPU; the CPU
  // multiplies f32 x by the widened weight. Quantized weights are dequantized to
  // bf16 on upload (the CPU reads them quantized and may quantize x too).
  const bool det = GetParam();
  const Case cases[] = {{DType::kF32, 2e-5},
                        {DType::kF16, det ? 2e-5 : 2e-3},
                        {DType::kBF16, det ? 2e-5 : 1.5e-2},
                        {DType::kQ8_0, 2.5e-2},
                        {DType::kQ4_0, 2.5e-2}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    for (int64_t m : {1, 5, 33}) {
      for (bool bias : {false, true}) {
        const int64_t k = 96, n = 40, ldy = bias ? n + 7 : n;
        const std::vector<float> x = RandomNormal(m * k, seed++), w = RandomNormal(n * k, seed++, 0.2f);
        const std::vector<float> b = RandomNormal(n, seed++);
        std::vector<uint8_t> storage;
        const WeightView host = HostWeight(w, n, k, c.dtype, &storage);
        std::vector<float> out[2];
        Backend* be[2] = {gpu_.get(), cpu_.get()};
        for (int i = 0; i < 2; ++i) {
          Mem mem(be[i]);
          StatusOr<WeightView> dw = be[i]->UploadWeight(host);
          ASSERT_TRUE(dw.ok()) << dw.status().ToString();
          float* y = mem.Put(std::vector<float>(m * ldy, -7.0f));  // padding columns must survive
          be[i]->Linear(mem.Put(x), m, *dw, bias ? mem.Put(b) : nullptr, y, ldy);
          out[i] = mem.Get(y, m * ldy);
        }
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t j = n; j < ldy; ++j) ASSERT_EQ(out[0][r * ldy + j], -7.0f) << "ldy padding overwritten";
        }
        Report("Linear " + std::string(DTypeName(c.dtype)) + " m=" + std::to_string(m) + (bias ? " bias ldy>n" : ""),
               MaxRelError(out[0], out[1]), c.tol);
      }
    }
  }
}

TEST_P(BackendOpsTest, EmbeddingNormsActivationsAndCopies) {
  const int64_t rows = 9, dim = 72, heads = 3, head_dim = 24, inter = 50, vocab = 31;
  const float eps = 1e-6f;
  const std::vector<float> x = RandomNormal(rows * dim, 11), x2 = RandomNormal(rows * dim, 12);
  std::vector<float> wn = RandomNormal(dim, 13, 0.1f), hw = RandomNormal(head_dim, 14, 0.1f);
  for (float& v : wn) v += 1.0f;
  for (float& v : hw) v += 1.0f;
  const std::vector<float> gate_up = RandomNormal(rows * 2 * inter, 15, 3.0f);
  const std::vector<float> table = RandomNormal(vocab * dim, 16);
  const std::vector<int32_t> ids = {3, 0, 30, 7, 7, 12, 29, 1, 5};
  const std::vector<int32_t> gather = {8, 0, 4, 4};
  std::vector<float> cos_sin(40 * head_dim);
  for (int64_t p = 0; p < 40; ++p) {
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      const double a = p * std::pow(10000.0, -2.0 * i / head_dim);
      cos_sin[p * head_dim + i] = static_cast<float>(std::cos(a));
      cos_sin[p * head_dim + head_dim / 2 + i] = static_cast<float>(std::sin(a));
    }
  }
  const std::vector<int32_t> positions = {0, 1, 2, 39, 17, 5, 5, 30, 8};
  struct Outs {
    std::vector<float> emb_f32, emb_bf16, emb_f16, rms, add_res, add_out, head, silu, rope, gathered, copied;
  };
  Outs o[2];
  Backend* be[2] = {gpu_.get(), cpu_.get()};
  for (int i = 0; i < 2; ++i) {
    Mem mem(be[i]);
    const int32_t* d_ids = mem.Put(ids);
    for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
      std::vector<uint8_t> storage;
      StatusOr<WeightView> w = be[i]->UploadWeight(HostWeight(table, vocab, dim, t, &storage));
      ASSERT_TRUE(w.ok());
      float* out = mem.Zeros<float>(rows * dim);
      be[i]->Embedding(*w, d_ids, rows, out);
      (t == DType::kF32 ? o[i].emb_f32 : t == DType::kBF16 ? o[i].emb_bf16 : o[i].emb_f16) = mem.Get(out, rows * dim);
    }
    float* d_x = mem.Put(x);
    float* d_out = mem.Zeros<float>(rows * dim);
    be[i]->RmsNorm(d_x, mem.Put(wn), rows, dim, eps, d_out);
    o[i].rms = mem.Get(d_out, rows * dim);
    float* res = mem.Put(x);
    be[i]->AddRmsNorm(res, mem.Put(x2), mem.Put(wn), rows, dim, eps, d_out);
    o[i].add_res = mem.Get(res, rows * dim);
    o[i].add_out = mem.Get(d_out, rows * dim);
    // Per-head norm on rows of stride dim holding heads x head_dim (= dim).
    float* hx = mem.Put(x);
    be[i]->HeadRmsNorm(hx, rows, heads, head_dim, dim, mem.Put(hw), eps);
    o[i].head = mem.Get(hx, rows * dim);
    float* act = mem.Zeros<float>(rows * inter);
    be[i]->SiluMul(mem.Put(gate_up), rows, inter, act);
    o[i].silu = mem.Get(act, rows * inter);
    float* rx = mem.Put(x);
    be[i]->Rope(rx, rows, heads, head_dim, dim, head_dim, mem.Put(positions), mem.Put(cos_sin));
    o[i].rope = mem.Get(rx, rows * dim);
    float* g = mem.Zeros<float>(gather.size() * dim);
    be[i]->GatherRows(d_x, dim, mem.Put(gather), static_cast<int64_t>(gather.size()), g);
    o[i].gathered = mem.Get(g, gather.size() * dim);
    float* c = mem.Put(std::vector<float>(rows * dim, 0.0f));
    be[i]->CopyWithinDevice(c + dim, d_x + 2 * dim, 3 * dim * 4);
    o[i].copied = mem.Get(c, rows * dim);
  }
  Report("Embedding f32 (exact)", MaxRelError(o[0].emb_f32, o[1].emb_f32), 0);
  Report("Embedding bf16 (exact)", MaxRelError(o[0].emb_bf16, o[1].emb_bf16), 0);
  Report("Embedding f16 (exact)", MaxRelError(o[0].emb_f16, o[1].emb_f16), 0);
  Report("RmsNorm", MaxRelError(o[0].rms, o[1].rms), 1e-5);
  Report("AddRmsNorm residual", MaxRelError(o[0].add_res, o[1].add_res), 0);
  Report("AddRmsNorm out", MaxRelError(o[0].add_out, o[1].add_out), 1e-5);
  Report("HeadRmsNorm", MaxRelError(o[0].head, o[1].head), 1e-5);
  Report("SiluMul", MaxRelError(o[0].silu, o[1].silu), 1e-6);
  Report("Rope", MaxRelError(o[0].rope, o[1].rope), 1e-6);
  Report("GatherRows (exact)", MaxRelError(o[0].gathered, o[1].gathered), 0);
  Report("CopyWithinDevice (exact)", MaxRelError(o[0].copied, o[1].copied), 0);
}

// Paged KV: WriteKv then Attention through block tables, on both backends. K/V
// are bf16-representable so the CPU's f32 cache and the GPU's bf16 cache hold the
// same values.
struct AttnCase {
  std::string name;
  std::vector<int32_t> seq_lens;  // context per sequence after this step
  std::vector<int32_t> new_tokens;  // tokens of each sequence in this step (the last ones)
  int64_t q_heads = 4, kv_heads = 2, head_dim = 64, block_size = 16, window = 0;
};

void RunAttention(Backend* be, const AttnCase& c, std::vector<float>* out, std::vector<float>* kcache) {
  Mem mem(be);
  const int64_t nseq = static_cast<int64_t>(c.seq_lens.size());
  int64_t max_len = 0, total_blocks = 0;
  for (int32_t l : c.seq_lens) {
    max_len = std::max<int64_t>(max_len, l);
    total_blocks += (l + c.block_size - 1) / c.block_size;
  }
  const int64_t width = (max_len + c.block_size - 1) / c.block_size;
  // Blocks handed out in a scrambled order so tables are not contiguous.
  std::vector<int32_t> order(total_blocks + 3);
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  std::vector<int32_t> tables(nseq * width, -1);
  int64_t next = 0;
  for (int64_t s = 0; s < nseq; ++s) {
    for (int64_t j = 0; j < (c.seq_lens[s] + c.block_size - 1) / c.block_size; ++j) tables[s * width + j] = order[next++];
  }
  const int64_t kv_cols = c.kv_heads * c.head_dim, q_cols = c.q_heads * c.head_dim;
  const int64_t num_blocks = static_cast<int64_t>(order.size());
  const int64_t cache_elems = num_blocks * c.block_size * kv_cols;
  const int64_t esize = DTypeSize(be->kv_dtype());
  KvLayerView kv{mem.Zeros<uint8_t>(cache_elems * esize), mem.Zeros<uint8_t>(cache_elems * esize), be->kv_dtype()};
  // Every position of every sequence: K/V written in one WriteKv; queries for
  // the step's new tokens only.
  std::vector<float> k_all, v_all;
  std::vector<int64_t> slots;
  std::vector<int32_t> positions, token_to_seq;
  uint32_t seed = 100;
  for (int64_t s = 0; s < nseq; ++s) {
    for (int32_t p = 0; p < c.seq_lens[s]; ++p) {
      for (float v : RandomNormal(kv_cols, seed++)) k_all.push_back(RoundBf16(v));
      for (float v : RandomNormal(kv_cols, seed++)) v_all.push_back(RoundBf16(v));
      slots.push_back(int64_t{tables[s * width + p / c.block_size]} * c.block_size + p % c.block_size);
      if (p >= c.seq_lens[s] - c.new_tokens[s]) {
        positions.push_back(p);
        token_to_seq.push_back(static_cast<int32_t>(s));
      }
    }
  }
  const int64_t all = static_cast<int64_t>(slots.size());
  be->WriteKv(mem.Put(k_all), kv_cols, mem.Put(v_all), kv_cols, all, c.kv_heads, c.head_dim, mem.Put(slots), kv);
  const int64_t t = static_cast<int64_t>(positions.size());
  const int64_t q_stride = q_cols + 5;  // strided q rows, as in the model's packed qkv
  const std::vector<float> q = RandomNormal(t * q_stride, 7);
  AttentionParams p;
  p.num_tokens = t;
  p.num_q_heads = c.q_heads;
  p.num_kv_heads = c.kv_heads;
  p.head_dim = c.head_dim;
  p.block_size = c.block_size;
  p.sliding_window = c.window;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.positions = mem.Put(positions);
  p.token_to_seq = mem.Put(token_to_seq);
  p.block_tables = mem.Put(tables);
  p.max_blocks_per_seq = width;
  p.host_positions = positions.data();
  p.host_token_to_seq = token_to_seq.data();
  p.max_context = max_len;
  float* o = mem.Zeros<float>(t * q_cols);
  be->Attention(mem.Put(q), q_stride, kv, p, o);
  *out = mem.Get(o, t * q_cols);
  // The cache as f32 (for the WriteKv comparison).
  std::vector<uint8_t> raw = mem.Get(static_cast<const uint8_t*>(kv.k), cache_elems * esize);
  kcache->resize(cache_elems);
  for (int64_t i = 0; i < cache_elems; ++i) {
    if (esize == 4) {
      std::memcpy(&(*kcache)[i], &raw[4 * i], 4);
    } else {
      uint16_t h;
      std::memcpy(&h, &raw[2 * i], 2);
      (*kcache)[i] = Bf16ToF32(h);
    }
  }
}

TEST_P(BackendOpsTest, WriteKvAndAttention) {
  std::vector<AttnCase> cases;
  cases.push_back({"decode (1 token each, split-K > 256 keys)", {1, 40, 300, 17}, {1, 1, 1, 1}});
  cases.push_back({"prefill (whole prompts)", {37, 20}, {37, 20}});
  cases.push_back({"mixed (chunk + decodes)", {50, 9, 33}, {20, 1, 1}});
  AttnCase w{"sliding window 24, GQA 8:1", {70, 5}, {6, 5}};
  w.q_heads = 8;
  w.kv_heads = 1;
  w.head_dim = 32;
  w.window = 24;
  w.block_size = 8;
  cases.push_back(w);
  for (const AttnCase& c : cases) {
    std::vector<float> out[2], cache[2];
    RunAttention(gpu_.get(), c, &out[0], &cache[0]);
    RunAttention(cpu_.get(), c, &out[1], &cache[1]);
    Report("WriteKv " + c.name + " (exact, bf16 values)", MaxRelError(cache[0], cache[1]), 0);
    Report("Attention " + c.name, MaxRelError(out[0], out[1]), 2e-5);
  }
}

TEST_P(BackendOpsTest, CopyBlocks) {
  const int64_t block_bytes = 256, blocks = 6;
  const std::vector<std::pair<int64_t, int64_t>> pairs = {{0, 3}, {5, 1}, {2, 4}};
  std::vector<float> out[2];
  Backend* be[2] = {gpu_.get(), cpu_.get()};
  for (int i = 0; i < 2; ++i) {
    Mem mem(be[i]);
    std::vector<void*> bases;
    std::vector<float*> ptrs;
    for (int l = 0; l < 3; ++l) {
      ptrs.push_back(mem.Put(RandomNormal(blocks * block_bytes / 4, 40 + l)));
      bases.push_back(ptrs.back());
    }
    be[i]->CopyBlocks(bases, block_bytes, pairs);
    for (float* p : ptrs) {
      std::vector<float> v = mem.Get(p, blocks * block_bytes / 4);
      out[i].insert(out[i].end(), v.begin(), v.end());
    }
  }
  Report("CopyBlocks (exact)", MaxRelError(out[0], out[1]), 0);
}

TEST_P(BackendOpsTest, QuantizedWeightsAreDequantizedToBf16) {
  const int64_t rows = 4, cols = 64;
  const std::vector<float> w = RandomNormal(rows * cols, 77);
  std::vector<uint8_t> storage;
  const WeightView host = HostWeight(w, rows, cols, DType::kQ8_0, &storage);
  StatusOr<WeightView> dw = gpu_->UploadWeight(host);
  ASSERT_TRUE(dw.ok()) << dw.status().ToString();
  EXPECT_EQ(dw->dtype, DType::kBF16);
  std::vector<uint16_t> got(rows * cols);
  gpu_->CopyToHost(got.data(), dw->data, rows * cols * 2);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(storage.data() + r * DTypeRowBytes(DType::kQ8_0, cols), DType::kQ8_0, cols, row.data());
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(got[r * cols + c], F32ToBf16(row[c])) << r << "," << c;
  }
}

TEST_P(BackendOpsTest, NameAndKvDtype) {
  EXPECT_NE(gpu_->name().find(GetParam() ? "deterministic" : "cublas"), std::string::npos) << gpu_->name();
  EXPECT_EQ(gpu_->kv_dtype(), DType::kBF16);
  EXPECT_TRUE(gpu_->TakeError().ok());
}

INSTANTIATE_TEST_SUITE_P(Modes, BackendOpsTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "Deterministic" : "Cublas"; });

}  // namespace
}  // namespace tessera
