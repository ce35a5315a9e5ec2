#include "engine/moe/moe_block.h"

#include <string>

#include "engine/parallel/shard/model_shard.h"

namespace tessera {
namespace {

float* F(const std::shared_ptr<void>& p) { return static_cast<float*>(p.get()); }

}  // namespace

StatusOr<std::unique_ptr<MoeBlock>> MoeBlock::Create(const ModelConfig& c, Backend* backend) {
  if (!c.is_moe()) return InvalidArgument("moe: " + c.architecture + " has no MoE layers");
  RETURN_IF_ERROR(backend->CheckMoe());
  auto b = std::unique_ptr<MoeBlock>(new MoeBlock());
  b->config_ = c;
  b->backend_ = backend;
  b->moe_index_.assign(c.num_layers, -1);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (!c.layer_moe[i]) continue;
    b->moe_index_[i] = static_cast<int64_t>(b->moe_layers_.size());
    b->moe_layers_.push_back(i);
  }
  b->weights_.resize(b->moe_layers_.size());
  for (MoeLayerWeights& w : b->weights_) {
    MoeExpertWeights& x = w.experts;
    x.num_experts = c.moe.num_experts;
    x.hidden = c.hidden_size;
    x.inter = c.moe.expert_inter;
    x.gate.resize(x.num_experts);
    x.up.resize(x.num_experts);
    x.down.resize(x.num_experts);
  }
  const int64_t count_bytes = static_cast<int64_t>(b->moe_layers_.size()) * c.moe.num_experts * 8;
  ASSIGN_OR_RETURN(b->counts_, backend->Allocate(count_bytes));  // zeroed
  return b;
}

Status MoeBlock::Bind(const WeightSpec& spec, const WeightView& w, const std::string& file) {
  if (spec.layer < 0 || spec.layer >= config_.num_layers || moe_index_[spec.layer] < 0) {
    return InvalidArgument(file + ": tensor '" + spec.name + "' belongs to no MoE layer");
  }
  MoeLayerWeights& L = weights_[moe_index_[spec.layer]];
  if (spec.IsExpert() && spec.expert >= config_.moe.num_experts) {
    return InvalidArgument(file + ": tensor '" + spec.name + "' names expert " + std::to_string(spec.expert) +
                           " of " + std::to_string(config_.moe.num_experts));
  }
  using R = WeightRole;
  switch (spec.role) {
    case R::kRouter: L.router = w; break;
    case R::kExpertGate: L.experts.gate[spec.expert] = w; break;
    case R::kExpertUp: L.experts.up[spec.expert] = w; break;
    case R::kExpertDown: L.experts.down[spec.expert] = w; break;
    case R::kSharedGate: L.shared_gate = w; break;
    case R::kSharedUp: L.shared_up = w; break;
    case R::kSharedDown: L.shared_down = w; break;
    case R::kSharedExpertGate: L.shared_expert_gate = w; break;
    default: return InvalidArgument(file + ": tensor '" + spec.name + "' is not an MoE weight");
  }
  // The routed experts of a layer share one dtype per projection (one kernel call runs
  // them all); gate, up and down may differ (llama-quantize's recipes give ffn_down more
  // bits in some layers).
  if (spec.IsExpert()) {
    const std::vector<WeightView>& same = spec.role == R::kExpertGate ? L.experts.gate
                                          : spec.role == R::kExpertUp ? L.experts.up
                                                                      : L.experts.down;
    const char* proj = spec.role == R::kExpertGate ? "gate" : spec.role == R::kExpertUp ? "up" : "down";
    for (const WeightView& other : same) {
      if (other.empty() || other.dtype == w.dtype) continue;
      return InvalidArgument(file + ": tensor '" + spec.name + "' is " + std::string(DTypeName(w.dtype)) +
                             " but the layer's other expert " + proj + " projections are " +
                             std::string(DTypeName(other.dtype)) +
                             "; the routed experts of a layer must share one dtype per projection");
    }
  }
  return Status::Ok();
}

void MoeBlock::BuildLocal() {
  local_.clear();
  for (size_t i = 0; i < weights_.size(); ++i) {
    const MoeExpertWeights& all = weights_[i].experts;
    MoeExpertWeights x;
    x.hidden = all.hidden;
    x.inter = all.inter;
    for (int64_t e : ep_->SlotExperts(static_cast<int64_t>(i))) {
      x.gate.push_back(all.gate[e]);
      x.up.push_back(all.up[e]);
      x.down.push_back(all.down[e]);
    }
    x.num_experts = static_cast<int64_t>(x.gate.size());
    local_.push_back(std::move(x));
  }
}

Status MoeBlock::Validate() {
  const MoeConfig& m = config_.moe;
  if (ep_) BuildLocal();
  for (size_t i = 0; i < weights_.size(); ++i) {
    const MoeLayerWeights& L = weights_[i];
    const std::string where = "moe layer " + std::to_string(moe_layers_[i]);
    bool missing = L.router.empty();
    const MoeExpertWeights& held = ep_ ? local_[i] : L.experts;
    for (int64_t e = 0; e < held.num_experts; ++e) {
      missing |= held.gate[e].empty() || held.up[e].empty() || held.down[e].empty();
    }
    missing |= m.shared_inter > 0 && (L.shared_gate.empty() || L.shared_up.empty() || L.shared_down.empty());
    missing |= m.shared_gate && L.shared_expert_gate.empty();
    if (missing) return Internal(where + ": weights not bound");
  }
  return Status::Ok();
}

Status MoeBlock::EnsureWorkspace(int64_t tokens) {
  if (tokens <= ws_.capacity) return Status::Ok();
  const MoeConfig& m = config_.moe;
  const int64_t h = config_.hidden_size;
  auto alloc = [&](int64_t bytes, std::shared_ptr<void>* p) -> Status {
    p->reset();
    ASSIGN_OR_RETURN(*p, backend_->Allocate(std::max<int64_t>(bytes, 4)));
    return Status::Ok();
  };
  RETURN_IF_ERROR(alloc(tokens * m.num_experts * 4, &ws_.logits));
  RETURN_IF_ERROR(alloc(tokens * m.top_k * 4, &ws_.ids));
  RETURN_IF_ERROR(alloc(tokens * m.top_k * 4, &ws_.weights));
  if (m.shared_inter > 0) {
    RETURN_IF_ERROR(alloc(tokens * 2 * m.shared_inter * 4, &ws_.shared_gate_up));
    RETURN_IF_ERROR(alloc(tokens * m.shared_inter * 4, &ws_.shared_act));
    RETURN_IF_ERROR(alloc(tokens * h * 4, &ws_.shared_out));
    RETURN_IF_ERROR(alloc(tokens * 4, &ws_.gate_logit));
  }
  ws_.capacity = tokens;
  return Status::Ok();
}

void MoeBlock::Forward(int64_t layer, const float* x, int64_t t, float* out) {
  const MoeConfig& m = config_.moe;
  const int64_t idx = moe_index_[layer];
  const MoeLayerWeights& L = weights_[idx];
  const int64_t h = config_.hidden_size;
  auto* ids = static_cast<int32_t*>(ws_.ids.get());
  Backend& b = *backend_;
  if (t > 0) {
    b.Linear(x, t, L.router, nullptr, F(ws_.logits), m.num_experts);
    b.MoeRoute(F(ws_.logits), t, m.num_experts, m.top_k, m.norm_topk_prob, ids, F(ws_.weights));
    // Scaled here, on the token's rank, so expert-parallel ranks receive final weights.
    if (m.routed_scaling_factor != 1.0) {
      b.Scale(F(ws_.weights), t * m.top_k, static_cast<float>(m.routed_scaling_factor));
    }
    b.MoeCountExperts(ids, t * m.top_k, m.num_experts, static_cast<int64_t*>(counts_.get()) + idx * m.num_experts);
  }
  if (ep_) {
    ep_->MoeExperts(idx, x, t, ids, F(ws_.weights), local_[idx], out);
  } else {
    b.MoeExperts(x, t, ids, F(ws_.weights), m.top_k, L.experts, out);
  }
  if (m.shared_inter == 0 || t == 0) return;
  const int64_t si = m.shared_inter;
  float* gu = F(ws_.shared_gate_up);
  b.Linear(x, t, L.shared_gate, nullptr, gu, 2 * si);
  b.Linear(x, t, L.shared_up, nullptr, gu + si, 2 * si);
  b.SiluMul(gu, t, si, F(ws_.shared_act));
  b.Linear(F(ws_.shared_act), t, L.shared_down, nullptr, F(ws_.shared_out), h);
  if (m.shared_gate) {
    b.Linear(x, t, L.shared_expert_gate, nullptr, F(ws_.gate_logit), 1);
    b.SigmoidGateAdd(out, F(ws_.shared_out), F(ws_.gate_logit), t, h);
  }
}

int64_t MoeBlock::expert_bytes() const {
  if (weights_.empty()) return 0;
  const MoeExpertWeights& x = ep_ ? local_[0] : weights_[0].experts;
  return x.gate[0].bytes() + x.up[0].bytes() + x.down[0].bytes();
}

StatusOr<ExpertLoad> MoeBlock::ReadExpertLoad() const {
  ExpertLoad load;
  load.num_experts = config_.moe.num_experts;
  load.layers = moe_layers_;
  if (ep_ && ep_->plan().expert_parallel()) {
    // Each rank routes only its tokens: the group's counts, gathered every step.
    load.counts = ep_->expert_totals();
    load.world_size = ep_->plan().options.world_size;
    load.rank_counts = ep_->expert_rank_totals();
    load.rebalances = ep_->rebalances();
    return load;
  }
  load.counts.resize(moe_layers_.size() * static_cast<size_t>(load.num_experts));
  backend_->CopyToHost(load.counts.data(), counts_.get(), static_cast<int64_t>(load.counts.size()) * 8);
  RETURN_IF_ERROR(backend_->TakeError());
  return load;
}

Status MoeBlock::Rebalance() {
  if (!ep_) return Status::Ok();
  std::vector<MoeExpertWeights*> tables;
  for (MoeLayerWeights& w : weights_) tables.push_back(&w.experts);
  RETURN_IF_ERROR(ep_->Rebalance(tables));
  BuildLocal();
  return Status::Ok();
}

void MoeBlock::ResetExpertLoad() {
  std::vector<int64_t> zeros(moe_layers_.size() * static_cast<size_t>(config_.moe.num_experts), 0);
  backend_->CopyFromHost(counts_.get(), zeros.data(), static_cast<int64_t>(zeros.size()) * 8);
}

}  // namespace tessera
