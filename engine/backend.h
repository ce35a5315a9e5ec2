// Backend: the small set of ops a model needs (docs/architecture.md, "Engine"). The model code is
// written once against this interface; CPU and CUDA implement it.
//
// Pointers passed to ops live in the backend's memory space (host memory for
// the CPU backend). Activations are f32; weights are WeightViews in whatever
// dtype the backend keeps them. Ops on one backend are issued from one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace tessera {

// A 2-D weight matrix [rows, cols] (row-major) resident on a backend. Quantized
// dtypes store each row as cols / DTypeBlockElems blocks (cols a multiple of it).
struct WeightView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  bool empty() const { return data == nullptr; }
  int64_t bytes() const { return rows * DTypeRowBytes(dtype, cols); }
};

// Paged KV cache of one layer, in the layout the backend chose: per layer
// [num_blocks, block_size, kv_heads, head_dim] elements of `dtype` (the
// backend's kv_dtype(): f32 on the CPU, bf16 on CUDA).
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  DType dtype = DType::kF32;
};

struct AttentionParams {
  int64_t num_tokens = 0;
  int64_t num_q_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 0;
  int64_t sliding_window = 0;  // 0 = full causal
  float scale = 1.0f;
  // > 0: each score s = scale * q.k becomes softcap * tanh(s / softcap) before the
  // softmax (Gemma 2's attn_logit_softcapping). Needs CheckOp(kAttentionSoftCap).
  float softcap = 0.0f;
  // Non-null: [num_q_heads] f32 sink logits, one per q head, in every softmax
  // denominator (gpt-oss attention sinks). Needs CheckOp(kAttentionSinks).
  const float* sinks = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* token_to_seq = nullptr;
  const int32_t* block_tables = nullptr;
  int64_t max_blocks_per_seq = 0;
  // Host copies of positions and token_to_seq (the backend may plan tiles from
  // them), and the largest position + 1 in the batch.
  const int32_t* host_positions = nullptr;
  const int32_t* host_token_to_seq = nullptr;
  int64_t max_context = 0;
};

// The routed experts of one MoE layer, each a gated FFN. Views may point into
// one stacked tensor (GGUF *_exps); all experts share one dtype and shape.
struct MoeExpertWeights {
  int64_t num_experts = 0;
  int64_t hidden = 0;                   // model hidden size (x and out columns)
  int64_t inter = 0;                    // moe_intermediate_size
  std::vector<WeightView> gate, up;     // per expert [inter, hidden]
  std::vector<WeightView> down;         // per expert [hidden, inter]
  // Per expert biases as f32 [1, inter] / [1, hidden] views (gpt-oss), or empty
  // vectors: none. They travel with their expert (expert parallelism, EPLB).
  // Needs CheckOp(kMoeExpertBias).
  std::vector<WeightView> gate_bias, up_bias, down_bias;
  // The activation: silu(g) * u, or with swiglu_oai (CheckOp(kSwigluOai))
  // g' = min(g, limit), u' = clamp(u, -limit, limit), g' * sigmoid(alpha g') * (u' + 1).
  bool swiglu_oai = false;
  float swiglu_alpha = 0.0f, swiglu_limit = 0.0f;
  // The 3 projections then the 3 bias tables, for code that moves experts whole.
  std::vector<std::vector<WeightView>*> Tables() { return {&gate, &up, &down, &gate_bias, &up_bias, &down_bias}; }
};

// Multi-head latent attention (engine/mla/) of one layer, weight-absorbed: the
// per-head matrices that expand the latent, and the buffers the op works in.
struct MlaAttentionParams {
  int64_t num_heads = 0;
  int64_t kv_lora_rank = 0;  // r
  int64_t nope_dim = 0;      // qk_nope_head_dim
  int64_t rope_dim = 0;      // qk_rope_head_dim
  int64_t v_head_dim = 0;
  std::vector<WeightView> k_b;  // per head [r, nope_dim]: W_UK^T (absorbs the query)
  std::vector<WeightView> v_b;  // per head [v_head_dim, r]: W_UV (expands the output)
  const float* cos_sin = nullptr;  // rope table, rows of rope_dim (interleaved pairs)
  const int64_t* slot_mapping = nullptr;
  // Scratch in backend memory: q_nope [heads, tokens, nope_dim], q_hat [tokens, heads,
  // r + rope_dim], o_hat [heads, tokens, r].
  float* q_nope = nullptr;
  float* q_hat = nullptr;
  float* o_hat = nullptr;
};

// Ops only some architectures need; Model::Load asks Backend::CheckOp for each one
// its config uses, so a backend without one refuses the model by name at load.
enum class BackendOp {
  kGeluTanhMul, kScale, kSoftCap, kAttentionSoftCap,
  kAttentionSinks, kMoeSoftmaxTopK, kMoeExpertBias, kSwigluOai, kAdd, kMlaAttention, kMoeGroupedRoute,
};
inline const char* BackendOpName(BackendOp op) {
  switch (op) {
    case BackendOp::kGeluTanhMul: return "GeluTanhMul";
    case BackendOp::kScale: return "Scale";
    case BackendOp::kSoftCap: return "SoftCap";
    case BackendOp::kAttentionSoftCap: return "attention logit soft-capping";
    case BackendOp::kAttentionSinks: return "attention sinks";
    case BackendOp::kMoeSoftmaxTopK: return "MoE routing by softmax over the top-k logits";
    case BackendOp::kMoeExpertBias: return "MoE expert biases";
    case BackendOp::kSwigluOai: return "clamped SwiGLU (swiglu_limit) expert activation";
    case BackendOp::kAdd: return "Add";
    case BackendOp::kMlaAttention: return "multi-head latent attention";
    case BackendOp::kMoeGroupedRoute: return "MoE routing by sigmoid scores, expert groups or a selection bias";
  }
  return "?";
}

// How Backend::MoeRoute chooses a token's experts (engine/moe/ fills it from MoeConfig):
//   p = softmax(logits) | sigmoid(logits)      (kSoftmaxTopK: the top_k logits, then a
//                                              softmax over those k; nothing below applies)
//   s = p + selection_bias                     (when given; s only chooses)
//   groups: num_experts / n_group consecutive ids each, scored by max(s) (kMax) or the
//           sum of their two largest s (kTop2Sum); the experts outside the best
//           topk_group groups get s = -inf
//   ids = the top_k of s; weights = p[ids], divided by (their sum + 1e-20) with renormalize.
// Every top-k (groups and experts) breaks ties to the lower index.
struct MoeRouteParams {
  enum class Score { kSoftmax, kSoftmaxTopK, kSigmoid };
  enum class Groups { kNone, kMax, kTop2Sum };
  Score score = Score::kSoftmax;
  Groups groups = Groups::kNone;
  int64_t num_experts = 0, top_k = 0;
  int64_t n_group = 1, topk_group = 1;
  bool renormalize = false;
  const float* selection_bias = nullptr;  // f32 [num_experts] in backend memory, or null
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Element type of the paged KV cache this backend reads and writes.
  virtual DType kv_dtype() const { return DType::kF32; }

  // Makes a host weight (e.g. an mmapped safetensors tensor) usable by ops.
  // The CPU backend copies it into huge-page memory it owns (or, with
  // huge_page_weights off, returns a view of `host`, which must then outlive it).
  virtual StatusOr<WeightView> UploadWeight(const WeightView& host) = 0;
  // Allocates zeroed activation or cache memory; owned by the returned handle.
  virtual StatusOr<std::shared_ptr<void>> Allocate(int64_t bytes) = 0;
  virtual void CopyFromHost(void* dst, const void* src, int64_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, int64_t bytes) = 0;
  // Device-to-device copy of `bytes` within this backend's memory.
  virtual void CopyWithinDevice(void* dst, const void* src, int64_t bytes) = 0;
  // For every base in `bases` (one per layer and side) and every (src, dst) block
  // pair: copies block_bytes at base + src * block_bytes to base + dst * block_bytes.
  // Pairs must not chain (no dst is another pair's src). Default: CopyWithinDevice.
  virtual void CopyBlocks(const std::vector<void*>& bases, int64_t block_bytes,
                          const std::vector<std::pair<int64_t, int64_t>>& pairs) {
    for (void* base : bases) {
      for (const auto& [src, dst] : pairs) {
        char* b = static_cast<char*>(base);
        CopyWithinDevice(b + dst * block_bytes, b + src * block_bytes, block_bytes);
      }
    }
  }
  // Rows of src [*, cols] at indices[i] go to dst row i.
  virtual void GatherRows(const float* src, int64_t cols, const int32_t* indices, int64_t n,
                          float* dst) = 0;

  virtual void Embedding(const WeightView& table, const int32_t* ids, int64_t n, float* out) = 0;
  // y[m, :] = x[m, :] @ w^T + bias, y row stride ldy.
  virtual void Linear(const float* x, int64_t m, const WeightView& w, const float* bias, float* y,
                      int64_t ldy) = 0;
  virtual void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                       float* out) = 0;
  // Per-head RMSNorm in place (Qwen3 q/k norm): x is [tokens, heads, head_dim]
  // with row stride x_stride floats between tokens; weight is [head_dim].
  virtual void HeadRmsNorm(float* x, int64_t tokens, int64_t heads, int64_t head_dim,
                           int64_t x_stride, const float* weight, float eps) {
    for (int64_t i = 0; i < tokens; ++i) RmsNorm(x + i * x_stride, weight, heads, head_dim, eps, x + i * x_stride);
  }
  virtual void AddRmsNorm(float* residual, const float* x, const float* weight, int64_t rows,
                          int64_t dim, float eps, float* out) = 0;
  virtual void SiluMul(const float* gate_up, int64_t rows, int64_t inter, float* out) = 0;

  // --- Optional ops (BackendOp). A backend that implements one overrides it and
  // returns OK from CheckOp for it; the defaults are never reached, since a model
  // needing the op is refused at load.
  virtual Status CheckOp(BackendOp op) const {
    return Unimplemented(name() + ": no " + BackendOpName(op) + " op");
  }
  // out[r, i] = gelu_tanh(gate_up[r, i]) * gate_up[r, inter + i]  (GeGLU), with
  // gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  virtual void GeluTanhMul(const float* gate_up, int64_t rows, int64_t inter, float* out) {
    (void)gate_up, (void)rows, (void)inter, (void)out;
  }
  // Multi-head latent attention (CheckOp(kMlaAttention)). q: [tokens, heads, nope_dim +
  // rope_dim]; latent: [tokens, r + rope_dim] = [RMSNorm'd c | k_rope]; both rotated in
  // place (interleaved pairs, a.positions), then each latent row is written to
  // cache.k at its slot (a latent cache: KvLayerView.k rows of r + rope_dim values).
  // Per token and head: q_hat = [k_b[h] q_nope | q_rope]; softmax(a.scale * q_hat .
  // row_j) over the causal keys j in position order; o_hat = sum_j p_j c_j; out[t,
  // h*v_head_dim ..] = v_b[h] o_hat. out: [tokens, heads * v_head_dim].
  virtual void MlaAttention(float* q, float* latent, const MlaAttentionParams& m, KvLayerView cache,
                            const AttentionParams& a, float* out) {
    (void)q, (void)latent, (void)m, (void)cache, (void)a, (void)out;
  }
  // x[i] *= s for i < n.
  virtual void Scale(float* x, int64_t n, float s) { (void)x, (void)n, (void)s; }
  // x[i] = cap * tanh(x[i] / cap) for i < n (final logit soft-capping).
  virtual void SoftCap(float* x, int64_t n, float cap) { (void)x, (void)n, (void)cap; }
  // out[i] += x[i] for i < n (an ungated shared expert's output).
  virtual void Add(float* out, const float* x, int64_t n) { (void)out, (void)x, (void)n; }

  // Rotates the first rot_dim dims of each head (rot_dim <= head_dim, even;
  // partial rotary when smaller); cos_sin rows are rot_dim floats (engine/rope.h).
  virtual void Rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t x_stride,
                    int64_t rot_dim, const int32_t* positions, const float* cos_sin) = 0;
  virtual void WriteKv(const float* k, int64_t k_stride, const float* v, int64_t v_stride,
                       int64_t tokens, int64_t kv_heads, int64_t head_dim,
                       const int64_t* slot_mapping, KvLayerView cache) = 0;
  virtual void Attention(const float* q, int64_t q_stride, KvLayerView cache,
                         const AttentionParams& p, float* out) = 0;

  // --- Mixture of experts (engine/moe/). A backend that runs MoE models
  // overrides all five; CheckMoe() is asked when an MoE model loads.
  virtual Status CheckMoe() const { return Unimplemented(name() + ": no MoE ops"); }
  // Per token, in f32 (deterministic and batch-invariant): router logits [tokens,
  // num_experts] to the top_k expert ids and weights [tokens, top_k], best first
  // (MoeRouteParams says how). Anything but the plain softmax needs CheckOp of
  // kMoeSoftmaxTopK / kMoeGroupedRoute.
  virtual void MoeRoute(const float* router_logits, int64_t tokens, const MoeRouteParams& p, int32_t* topk_ids,
                        float* topk_weights) {
    (void)router_logits, (void)tokens, (void)p, (void)topk_ids, (void)topk_weights;
  }
  // out[t, :] = sum over j = 0..top_k-1, in that order, of
  //   topk_weights[t, j] * (down_e(act(gate_e x[t] + bg_e, up_e x[t] + bu_e)) + bd_e),  e = topk_ids[t, j]
  // (act and the optional biases: MoeExpertWeights).
  // A token's result must not depend on which other tokens share its experts
  // (batch invariance): group tokens by expert so each expert's weights are read
  // once per call, but keep every row's arithmetic independent of the group.
  virtual void MoeExperts(const float* x, int64_t tokens, const int32_t* topk_ids, const float* topk_weights,
                          int64_t top_k, const MoeExpertWeights& w, float* out) {
    (void)x, (void)tokens, (void)topk_ids, (void)topk_weights, (void)top_k, (void)w, (void)out;
  }
  // counts[e] += number of (token, slot) pairs routed to expert e (n = tokens * top_k ids).
  virtual void MoeCountExperts(const int32_t* topk_ids, int64_t n, int64_t num_experts, int64_t* counts) {
    (void)topk_ids, (void)n, (void)num_experts, (void)counts;
  }
  // out[r, :] += sigmoid(gate_logits[r]) * shared[r, :]   (Qwen2-MoE shared expert).
  virtual void SigmoidGateAdd(float* out, const float* shared, const float* gate_logits, int64_t rows,
                              int64_t dim) {
    (void)out, (void)shared, (void)gate_logits, (void)rows, (void)dim;
  }

  // Ops return void and may run asynchronously (CUDA): the first failure since
  // the last call is kept and returned here (then cleared). CPU: always OK.
  virtual Status TakeError() { return Status::Ok(); }
  // Whether the attention kernels handle this head size (checked at model load).
  virtual Status CheckHeadDim(int64_t head_dim) const {
    (void)head_dim;
    return Status::Ok();
  }
  // Device memory in bytes; false when the backend has no separate device memory.
  virtual bool MemoryInfo(int64_t* total, int64_t* free) {
    (void)total;
    (void)free;
    return false;
  }

  // Graph capture (CUDA graphs). Between BeginCapture and EndCapture, ops are
  // recorded, not run; they must not allocate or copy from the host. Replay runs
  // a captured graph (same pointers, current memory contents). CPU: unsupported.
  virtual bool SupportsGraphs() const { return false; }
  virtual Status BeginCapture() { return Unimplemented(name() + ": no graph capture"); }
  virtual StatusOr<int64_t> EndCapture() { return Unimplemented(name() + ": no graph capture"); }
  virtual Status Replay(int64_t graph) {
    (void)graph;
    return Unimplemented(name() + ": no graph capture");
  }
  virtual void ReleaseGraph(int64_t graph) { (void)graph; }
};

struct CpuBackendOptions {
  int num_threads = 0;  // 0: all hardware threads available to the process
  // Copy weights into memory advised for 2 MiB transparent huge pages (decode
  // streams them at a higher bandwidth than from the 4 KiB pages of a file
  // mapping). Off: ops read the caller's host memory (the mmapped file) directly.
  bool huge_page_weights = true;
};
std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options);

}  // namespace tessera
