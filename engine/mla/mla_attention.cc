#include "engine/mla/mla_attention.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace tessera {
namespace {

float* F(const std::shared_ptr<void>& p) { return static_cast<float*>(p.get()); }

}  // namespace

StatusOr<std::unique_ptr<MlaAttention>> MlaAttention::Create(const ModelConfig& config, Backend* backend) {
  if (config.attention != AttentionKind::kMla) return InvalidArgument("mla: the config's attention is not MLA");
  Status s = backend->CheckOp(BackendOp::kMlaAttention);
  if (!s.ok()) return Unimplemented(config.architecture + " needs multi-head latent attention: " + s.message());
  auto m = std::unique_ptr<MlaAttention>(new MlaAttention());
  m->config_ = config;
  m->backend_ = backend;
  m->layers_.resize(config.num_layers);
  return m;
}

Status MlaAttention::BindKvB(const WeightSpec& spec, const SourceTensor& t, int64_t* bytes) {
  const MlaConfig& m = config_.mla;
  const int64_t H = config_.num_q_heads, nope = m.qk_nope_head_dim, v = m.v_head_dim, r = m.kv_lora_rank;
  if (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16) {
    return InvalidArgument(t.file + ": tensor '" + spec.name + "' has dtype " + std::string(DTypeName(t.dtype)) +
                           "; kv_b_proj must be f32, f16 or bf16 (it is split per head at load)");
  }
  const auto es = static_cast<int64_t>(DTypeSize(t.dtype));
  if (t.bytes != H * (nope + v) * r * es) {
    return InvalidArgument(t.file + ": tensor '" + spec.name + "' holds " + std::to_string(t.bytes) +
                           " bytes, expected [num_attention_heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank] = [" +
                           std::to_string(H * (nope + v)) + ", " + std::to_string(r) + "]");
  }
  const auto* src = static_cast<const uint8_t*>(t.data);
  std::vector<uint8_t> kb(static_cast<size_t>(H * r * nope * es)), vb(static_cast<size_t>(H * v * r * es));
  for (int64_t h = 0; h < H; ++h) {
    const uint8_t* head = src + h * (nope + v) * r * es;  // W_UK[h] rows, then W_UV[h] rows
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < nope; ++j) {
        std::memcpy(kb.data() + ((h * r + i) * nope + j) * es, head + (j * r + i) * es, es);
      }
    }
    std::memcpy(vb.data() + h * v * r * es, head + nope * r * es, v * r * es);
  }
  MlaLayerWeights& L = layers_[spec.layer];
  L.k_b.clear();
  L.v_b.clear();
  for (auto* part : {&kb, &vb}) {
    const bool is_k = part == &kb;
    const int64_t rows = is_k ? r : v, cols = is_k ? nope : r;
    host_.push_back(std::move(*part));
    ASSIGN_OR_RETURN(WeightView all, backend_->UploadWeight({host_.back().data(), t.dtype, H * rows, cols}));
    *bytes += all.bytes();
    for (int64_t h = 0; h < H; ++h) {
      WeightView w{static_cast<const uint8_t*>(all.data) + h * rows * cols * es, t.dtype, rows, cols};
      (is_k ? L.k_b : L.v_b).push_back(w);
    }
  }
  return Status::Ok();
}

Status MlaAttention::Validate() const {
  for (size_t i = 0; i < layers_.size(); ++i) {
    const MlaLayerWeights& L = layers_[i];
    const bool q_ok = config_.mla.q_lora_rank > 0 ? !L.qa.empty() && !L.qb.empty() && L.qa_norm : !L.q.empty();
    if (!q_ok || L.kva.empty() || L.o.empty() || !L.kva_norm || L.k_b.empty()) {
      return Internal("mla: layer " + std::to_string(i) + " is missing attention weights");
    }
  }
  return Status::Ok();
}

Status MlaAttention::EnsureWorkspace(int64_t tokens) {
  if (tokens <= ws_.capacity) return Status::Ok();
  const MlaConfig& m = config_.mla;
  const int64_t H = config_.num_q_heads, row = m.kv_lora_rank + m.qk_rope_head_dim;
  auto alloc = [&](int64_t floats, std::shared_ptr<void>* p) -> Status {
    p->reset();
    ASSIGN_OR_RETURN(*p, backend_->Allocate(std::max<int64_t>(floats, 1) * 4));
    return Status::Ok();
  };
  RETURN_IF_ERROR(alloc(tokens * H * config_.head_dim, &ws_.q));
  RETURN_IF_ERROR(alloc(tokens * m.q_lora_rank, &ws_.qa));
  RETURN_IF_ERROR(alloc(tokens * row, &ws_.latent));
  RETURN_IF_ERROR(alloc(tokens * H * m.qk_nope_head_dim, &ws_.q_nope));
  RETURN_IF_ERROR(alloc(tokens * H * row, &ws_.q_hat));
  RETURN_IF_ERROR(alloc(tokens * H * m.kv_lora_rank, &ws_.o_hat));
  RETURN_IF_ERROR(alloc(tokens * H * m.v_head_dim, &ws_.attn));
  ws_.capacity = tokens;
  return Status::Ok();
}

void MlaAttention::Forward(int64_t li, const float* x, int64_t t, const float* cos_sin, const int64_t* slots,
                           KvLayerView cache, AttentionParams a, float* out) {
  const MlaConfig& m = config_.mla;
  const MlaLayerWeights& L = layers_[li];
  const int64_t H = config_.num_q_heads, row = m.kv_lora_rank + m.qk_rope_head_dim;
  const auto eps = static_cast<float>(config_.rms_norm_eps);
  Backend& b = *backend_;
  const int64_t q_cols = H * config_.head_dim;
  if (m.q_lora_rank > 0) {
    b.Linear(x, t, L.qa, nullptr, F(ws_.qa), m.q_lora_rank);
    b.RmsNorm(F(ws_.qa), F(L.qa_norm), t, m.q_lora_rank, eps, F(ws_.qa));
    b.Linear(F(ws_.qa), t, L.qb, nullptr, F(ws_.q), q_cols);
  } else {
    b.Linear(x, t, L.q, nullptr, F(ws_.q), q_cols);
  }
  b.Linear(x, t, L.kva, nullptr, F(ws_.latent), row);
  // RMSNorm of the latent c only (the first kv_lora_rank values of each row), in place.
  b.HeadRmsNorm(F(ws_.latent), t, 1, m.kv_lora_rank, row, F(L.kva_norm), eps);
  MlaAttentionParams p;
  p.num_heads = H;
  p.kv_lora_rank = m.kv_lora_rank;
  p.nope_dim = m.qk_nope_head_dim;
  p.rope_dim = m.qk_rope_head_dim;
  p.v_head_dim = m.v_head_dim;
  p.k_b = L.k_b;
  p.v_b = L.v_b;
  p.cos_sin = cos_sin;
  p.slot_mapping = slots;
  p.q_nope = F(ws_.q_nope);
  p.q_hat = F(ws_.q_hat);
  p.o_hat = F(ws_.o_hat);
  a.num_tokens = t;
  a.scale = static_cast<float>(config_.attn_scale);
  b.MlaAttention(F(ws_.q), F(ws_.latent), p, cache, a, F(ws_.attn));
  b.Linear(F(ws_.attn), t, L.o, nullptr, out, config_.hidden_size);
}

}  // namespace tessera
