// MlaAttention: DeepSeek-V2/V3 multi-head latent attention (docs/architecture.md,
// "Engine"), run by Model in place of multi-head attention when the config's
// attention kind is kMla. Per layer and token x:
//
//   q        = q_proj x  |  q_b_proj RMSNorm(q_a_proj x)          [heads, nope + rope]
//   [c | kr] = kv_a_proj_with_mqa x;  c = RMSNorm(c)              the cached latent row
//   rope (interleaved pairs) on q's rope part and on kr (one kr for all heads)
//   absorbed: q_hat = [W_UK[h]^T q_nope | q_rope]; softmax over the latent rows;
//             o_h = W_UV[h] (sum_j p_j c_j);  out = o_proj [o_0 .. o_{H-1}]
//
// W_UK / W_UV are kv_b_proj's per-head row blocks, split (and W_UK transposed) once at
// load. The absorbed form runs for every token, prefill and decode alike, so a
// sequence's logits do not depend on batching, chunking or prefix hits ("Batch
// invariance"); the expanded form (K and V per head from the latent) exists only in
// the NumPy reference (tests/reference/reference_deepseek.py), which checks the two agree.
// Thread safety: like Model, one Forward at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/model_config.h"
#include "engine/weight_source.h"
#include "engine/weight_specs.h"

namespace tessera {

struct MlaLayerWeights {
  WeightView q;            // q_proj [heads * (nope + rope), hidden]; empty with q_lora
  WeightView qa, qb;       // q_a_proj [q_lora, hidden], q_b_proj [heads * (nope + rope), q_lora]
  WeightView kva;          // kv_a_proj_with_mqa [r + rope, hidden]
  WeightView o;            // o_proj [hidden, heads * v_head_dim]
  std::shared_ptr<void> qa_norm, kva_norm;  // f32 in backend memory
  std::vector<WeightView> k_b, v_b;         // per head, from kv_b_proj (BindKvB)
};

class MlaAttention {
 public:
  // For a config with attention == kMla; fails when the backend has no MLA op.
  static StatusOr<std::unique_ptr<MlaAttention>> Create(const ModelConfig& config, Backend* backend);
  // The layer's weights, for Model's binder to fill the plain matrices and norms.
  MlaLayerWeights* layer(int64_t i) { return &layers_[i]; }
  // kv_b_proj as stored (f32/f16/bf16, [heads * (nope + v), r]): split per head into
  // k_b[h] = W_UK[h]^T [r, nope] and v_b[h] = W_UV[h] [v, r], uploaded. Exact (a copy);
  // O(kv_b bytes) host memory kept for the backend's views. Quantized: refused,
  // naming the tensor. Adds the uploaded bytes to *bytes.
  Status BindKvB(const WeightSpec& spec, const SourceTensor& t, int64_t* bytes);
  // After every spec is bound: every layer has its matrices and norms.
  Status Validate() const;
  Status EnsureWorkspace(int64_t tokens);
  // out[0..tokens) = o_proj(MLA(x)) for layer `layer` (x, out: [tokens, hidden]);
  // writes the tokens' latent rows into `cache` at `slots`. `a` carries the step's
  // positions, block tables and block size; its scale is replaced by the config's.
  void Forward(int64_t layer, const float* x, int64_t tokens, const float* cos_sin, const int64_t* slots,
               KvLayerView cache, AttentionParams a, float* out);

 private:
  MlaAttention() = default;

  ModelConfig config_;
  Backend* backend_ = nullptr;  // not owned
  std::vector<MlaLayerWeights> layers_;
  // Host copies of the split kv_b_proj (the CPU backend may keep views of them).
  std::vector<std::vector<uint8_t>> host_;
  struct Workspace {
    int64_t capacity = 0;
    std::shared_ptr<void> q, qa, latent, q_nope, q_hat, o_hat, attn;
  } ws_;
};

}  // namespace tessera
