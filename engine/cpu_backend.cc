// CPU implementation of Backend: forwards to kernels/cpu with one thread pool.
#include <cstdlib>
#include <cstring>
#include <new>

#include "engine/backend.h"
#include "kernels/cpu/ops.h"

namespace tessera {
namespace {

namespace k = kernels::cpu;

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& o)
      : pool_(o.num_threads > 0 ? o.num_threads : ThreadPool::HardwareThreads()) {}

  std::string name() const override {
    return std::string("cpu(") + (k::UseAvx2() ? "avx2" : "scalar") + ", " +
           std::to_string(pool_.num_threads()) + " threads)";
  }

  StatusOr<WeightView> UploadWeight(const WeightView& host) override { return host; }

  StatusOr<std::shared_ptr<void>> Allocate(int64_t bytes) override {
    const size_t size = (static_cast<size_t>(bytes) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, size == 0 ? 64 : size);
    if (p == nullptr) return ResourceExhausted("cpu backend: cannot allocate " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, size);
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }

  void CopyFromHost(void* dst, const void* src, int64_t bytes) override { std::memcpy(dst, src, bytes); }
  void CopyToHost(void* dst, const void* src, int64_t bytes) override { std::memcpy(dst, src, bytes); }
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
  void Rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t x_stride,
            const int32_t* positions, const float* cos_sin) override {
    k::Rope(x, tokens, heads, head_dim, x_stride, head_dim, positions, cos_sin, &pool_);
  }
  void WriteKv(const float* kk, int64_t k_stride, const float* v, int64_t v_stride, int64_t tokens,
               int64_t kv_heads, int64_t head_dim, const int64_t* slots, KvLayerView c) override {
    k::WriteKv(kk, k_stride, v, v_stride, tokens, kv_heads, head_dim, slots, c.k, c.v);
  }
  void Attention(const float* q, int64_t q_stride, KvLayerView c, const AttentionParams& p,
                 float* out) override {
    k::PagedAttentionArgs a;
    a.q = q;
    a.q_stride = q_stride;
    a.k_cache = c.k;
    a.v_cache = c.v;
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
    a.out = out;
    k::PagedAttention(a, &pool_);
  }

 private:
  ThreadPool pool_;
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace tessera
