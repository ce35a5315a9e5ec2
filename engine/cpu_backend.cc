// CPU implementation of Backend: forwards to kernels/cpu with one thread pool.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "engine/backend.h"
#include "kernels/cpu/mla_attention.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/ops.h"

namespace tessera {
namespace {

namespace k = kernels::cpu;

// Bump allocator over anonymous mappings advised for transparent huge pages.
// Decode streams every weight once per step; from 4 KiB pages (an mmapped file)
// this VM class reads ~30% slower than from 2 MiB pages (tessera-membw --pages
// both), so weights are copied here. Chunks are 2 MiB-aligned, >= 64 MiB, and
// freed with the arena. Thread-safe.
class HugePageArena {
 public:
  HugePageArena() = default;
  HugePageArena(const HugePageArena&) = delete;
  HugePageArena& operator=(const HugePageArena&) = delete;
  ~HugePageArena() {
    for (const Chunk& c : chunks_) munmap(c.map, c.map_size);
  }

  // 64-byte aligned, or nullptr when the mapping fails.
  void* Allocate(size_t bytes) {
    constexpr size_t kHuge = size_t{2} << 20, kChunk = size_t{64} << 20;
    bytes = (bytes + 63) / 64 * 64;
    std::lock_guard<std::mutex> lock(mu_);
    if (chunks_.empty() || chunks_.back().size - chunks_.back().used < bytes) {
      const size_t size = (std::max(bytes, kChunk) + kHuge - 1) / kHuge * kHuge;
      const size_t map_size = size + kHuge;  // room to align the start to 2 MiB
      void* map = mmap(nullptr, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (map == MAP_FAILED) return nullptr;
      auto* base = reinterpret_cast<uint8_t*>(
          (reinterpret_cast<uintptr_t>(map) + kHuge - 1) / kHuge * kHuge);
      madvise(base, size, MADV_HUGEPAGE);  // best effort: THP may be off
      chunks_.push_back({map, map_size, base, size, 0});
    }
    Chunk& c = chunks_.back();
    void* p = c.base + c.used;
    c.used += bytes;
    return p;
  }

 private:
  struct Chunk {
    void* map;
    size_t map_size;
    uint8_t* base;
    size_t size;
    size_t used;
  };
  std::mutex mu_;
  std::vector<Chunk> chunks_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& o)
      : pool_(o.num_threads > 0 ? o.num_threads : ThreadPool::HardwareThreads()),
        copy_weights_(o.huge_page_weights) {}

  std::string name() const override {
    return std::string("cpu(") + (k::UseAvx2() ? "avx2" : "scalar") + ", " +
           std::to_string(pool_.num_threads()) + " threads)";
  }

  StatusOr<WeightView> UploadWeight(const WeightView& host) override {
    if (!copy_weights_) return host;
    void* p = arena_.Allocate(static_cast<size_t>(host.bytes()));
    if (p == nullptr) {
      return ResourceExhausted("cpu backend: cannot map " + std::to_string(host.bytes()) +
                               " bytes for a weight (start with huge_page_weights off to use the file mapping)");
    }
    // Copy in slices across the pool: page faults and copying both scale.
    const auto* src = static_cast<const uint8_t*>(host.data);
    auto* dst = static_cast<uint8_t*>(p);
    const int64_t bytes = host.bytes(), slice = int64_t{4} << 20;
    pool_.ParallelFor((bytes + slice - 1) / slice, 1, [&](int64_t b, int64_t e) {
      const int64_t lo = b * slice, hi = std::min(bytes, e * slice);
      std::memcpy(dst + lo, src + lo, static_cast<size_t>(hi - lo));
    });
    WeightView out = host;
    out.data = p;
    return out;
  }

  StatusOr<std::shared_ptr<void>> Allocate(int64_t bytes) override {
    const size_t size = (static_cast<size_t>(bytes) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, size == 0 ? 64 : size);
    if (p == nullptr) return ResourceExhausted("cpu backend: cannot allocate " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, size);
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }

  void CopyFromHost(void* dst, const void* src, int64_t bytes) override { std::memcpy(dst, src, bytes); }
  void CopyToHost(void* dst, const void* src, int64_t bytes) override { std::memcpy(dst, src, bytes); }
  void CopyWithinDevice(void* dst, const void* src, int64_t bytes) override { std::memcpy(dst, src, bytes); }
  void GatherRows(const float* src, int64_t cols, const int32_t* idx, int64_t n, float* dst) override {
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * cols, src + idx[i] * cols, cols * sizeof(float));
  }

  void Embedding(const WeightView& t, const int32_t* ids, int64_t n, float* out) override {
    k::Embedding(t.data, t.dtype, t.cols, ids, n, out, &pool_);
  }
  void Linear(const float* x, int64_t m, const WeightView& w, const float* bias, float* y,
              int64_t ldy) override {
    k::Linear(x, m, w.cols, w.data, w.dtype, w.rows, bias, y, ldy, &pool_);
  }
  void RmsNorm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) override {
    k::RmsNorm(x, w, rows, dim, eps, out, &pool_);
  }
  void AddRmsNorm(float* residual, const float* x, const float* w, int64_t rows, int64_t dim, float eps,
                  float* out) override {
    k::AddRmsNorm(residual, x, w, rows, dim, eps, out, &pool_);
  }
  void SiluMul(const float* gate_up, int64_t rows, int64_t inter, float* out) override {
    k::SiluMul(gate_up, rows, inter, out, &pool_);
  }
  Status CheckOp(BackendOp op) const override {
    (void)op;
    return Status::Ok();  // every optional op
  }
  void GeluTanhMul(const float* gate_up, int64_t rows, int64_t inter, float* out) override {
    k::GeluTanhMul(gate_up, rows, inter, out, &pool_);
  }
  void Scale(float* x, int64_t n, float s) override { k::Scale(x, n, s, &pool_); }
  void SoftCap(float* x, int64_t n, float cap) override { k::SoftCap(x, n, cap, &pool_); }
  void Add(float* out, const float* x, int64_t n) override { k::AddTo(out, x, n, &pool_); }
  void Rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t x_stride, int64_t rot_dim,
            const int32_t* positions, const float* cos_sin) override {
    k::Rope(x, tokens, heads, head_dim, x_stride, rot_dim, positions, cos_sin, &pool_);
  }
  void WriteKv(const float* kk, int64_t k_stride, const float* v, int64_t v_stride, int64_t tokens,
               int64_t kv_heads, int64_t head_dim, const int64_t* slots, KvLayerView c) override {
    k::WriteKv(kk, k_stride, v, v_stride, tokens, kv_heads, head_dim, slots, static_cast<float*>(c.k),
              static_cast<float*>(c.v));
  }
  void Attention(const float* q, int64_t q_stride, KvLayerView c, const AttentionParams& p,
                 float* out) override {
    k::PagedAttentionArgs a;
    a.q = q;
    a.q_stride = q_stride;
    a.k_cache = static_cast<const float*>(c.k);
    a.v_cache = static_cast<const float*>(c.v);
    a.num_tokens = p.num_tokens;
    a.num_q_heads = p.num_q_heads;
    a.num_kv_heads = p.num_kv_heads;
    a.head_dim = p.head_dim;
    a.block_size = p.block_size;
    a.positions = p.positions;
    a.token_to_seq = p.token_to_seq;
    a.block_tables = p.block_tables;
    a.max_blocks_per_seq = p.max_blocks_per_seq;
    a.sliding_window = p.sliding_window;
    a.scale = p.scale;
    a.softcap = p.softcap;
    a.sinks = p.sinks;
    a.out = out;
    k::PagedAttention(a, &pool_);
  }

  void MlaAttention(float* q, float* latent, const MlaAttentionParams& m, KvLayerView c, const AttentionParams& p,
                    float* out) override {
    std::vector<const void*>& kb = mla_k_b_;
    std::vector<const void*>& vb = mla_v_b_;
    kb.clear();
    vb.clear();
    for (const WeightView& w : m.k_b) kb.push_back(w.data);
    for (const WeightView& w : m.v_b) vb.push_back(w.data);
    k::MlaAttentionArgs a;
    a.q = q;
    a.latent = latent;
    a.cache = static_cast<float*>(c.k);
    a.num_tokens = p.num_tokens;
    a.num_heads = m.num_heads;
    a.r = m.kv_lora_rank;
    a.nope = m.nope_dim;
    a.rope = m.rope_dim;
    a.v_dim = m.v_head_dim;
    a.k_b = kb.data();
    a.v_b = vb.data();
    a.k_b_type = m.k_b.empty() ? DType::kF32 : m.k_b[0].dtype;
    a.v_b_type = m.v_b.empty() ? DType::kF32 : m.v_b[0].dtype;
    a.cos_sin = m.cos_sin;
    a.positions = p.positions;
    a.slot_mapping = m.slot_mapping;
    a.token_to_seq = p.token_to_seq;
    a.block_tables = p.block_tables;
    a.max_blocks_per_seq = p.max_blocks_per_seq;
    a.block_size = p.block_size;
    a.scale = p.scale;
    a.q_nope = m.q_nope;
    a.q_hat = m.q_hat;
    a.o_hat = m.o_hat;
    a.out = out;
    k::MlaAttention(a, &pool_);
  }

  Status CheckMoe() const override { return Status::Ok(); }
  void MoeRoute(const float* logits, int64_t tokens, const MoeRouteParams& p, int32_t* ids,
                float* weights) override {
    using P = MoeRouteParams;
    if (p.score == P::Score::kSoftmaxTopK) {
      k::MoeRouteSoftmaxTopK(logits, tokens, p.num_experts, p.top_k, ids, weights);
      return;
    }
    k::MoeRouteArgs a;
    a.num_experts = p.num_experts;
    a.top_k = p.top_k;
    a.sigmoid = p.score == P::Score::kSigmoid;
    a.groups = p.groups == P::Groups::kMax       ? k::MoeGroupScore::kMax
               : p.groups == P::Groups::kTop2Sum ? k::MoeGroupScore::kTop2Sum
                                                 : k::MoeGroupScore::kNone;
    a.n_group = p.n_group;
    a.topk_group = p.topk_group;
    a.renormalize = p.renormalize;
    a.selection_bias = p.selection_bias;
    k::MoeRoute(logits, tokens, a, ids, weights);
  }
  void MoeExperts(const float* x, int64_t tokens, const int32_t* ids, const float* weights, int64_t top_k,
                  const MoeExpertWeights& w, float* out) override {
    moe_ptrs_.resize(3 * static_cast<size_t>(w.num_experts));
    for (int64_t e = 0; e < w.num_experts; ++e) {
      moe_ptrs_[e] = w.gate[e].data;
      moe_ptrs_[w.num_experts + e] = w.up[e].data;
      moe_ptrs_[2 * w.num_experts + e] = w.down[e].data;
    }
    k::MoeExpertsArgs a;
    a.x = x;
    a.tokens = tokens;
    a.hidden = w.hidden;
    a.inter = w.inter;
    a.top_k = top_k;
    a.num_experts = w.num_experts;
    a.topk_ids = ids;
    a.topk_weights = weights;
    if (!w.gate.empty()) {
      a.gate_dtype = w.gate[0].dtype;
      a.up_dtype = w.up[0].dtype;
      a.down_dtype = w.down[0].dtype;
    }
    a.gate = moe_ptrs_.data();
    a.up = moe_ptrs_.data() + w.num_experts;
    a.down = moe_ptrs_.data() + 2 * w.num_experts;
    if (!w.gate_bias.empty()) {
      moe_bias_.resize(3 * static_cast<size_t>(w.num_experts));
      for (int64_t e = 0; e < w.num_experts; ++e) {
        moe_bias_[e] = static_cast<const float*>(w.gate_bias[e].data);
        moe_bias_[w.num_experts + e] = static_cast<const float*>(w.up_bias[e].data);
        moe_bias_[2 * w.num_experts + e] = static_cast<const float*>(w.down_bias[e].data);
      }
      a.gate_bias = moe_bias_.data();
      a.up_bias = moe_bias_.data() + w.num_experts;
      a.down_bias = moe_bias_.data() + 2 * w.num_experts;
    }
    a.swiglu_oai = w.swiglu_oai;
    a.swiglu_alpha = w.swiglu_alpha;
    a.swiglu_limit = w.swiglu_limit;
    a.out = out;
    k::MoeExperts(a, &moe_scratch_, &pool_);
  }
  void MoeCountExperts(const int32_t* ids, int64_t n, int64_t num_experts, int64_t* counts) override {
    k::MoeCountExperts(ids, n, num_experts, counts);
  }
  void SigmoidGateAdd(float* out, const float* shared, const float* gate_logits, int64_t rows,
                      int64_t dim) override {
    k::SigmoidGateAdd(out, shared, gate_logits, rows, dim, &pool_);
  }

 private:
  ThreadPool pool_;
  // MlaAttention's per-head weight pointers, refilled per call in place (no allocation per
  // layer and step once grown), like moe_ptrs_; ops are issued from one thread (engine/backend.h).
  std::vector<const void*> mla_k_b_, mla_v_b_;
  const bool copy_weights_;
  HugePageArena arena_;  // weights; outlives every WeightView handed out
  k::MoeScratch moe_scratch_;           // MoeExperts' buffers, grown to the largest call
  std::vector<const void*> moe_ptrs_;   // MoeExperts' expert matrix pointers
  std::vector<const float*> moe_bias_;  // MoeExperts' expert bias pointers
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace tessera
