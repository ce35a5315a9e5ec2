#include "engine/moe/moe_block.h"

#include <string>

#include "engine/parallel/shard/model_shard.h"

namespace tessera {
namespace {

float* F(const std::shared_ptr<void>& p) { return static_cast<float*>(p.get()); }

MoeRouteParams RouteParams(const MoeConfig& m) {
  using P = MoeRouteParams;
  P p;
  p.score = m.scoring == MoeScoring::kSoftmaxTopK ? P::Score::kSoftmaxTopK
            : m.scoring == MoeScoring::kSigmoid   ? P::Score::kSigmoid
                                                  : P::Score::kSoftmax;
  p.groups = m.topk_method == MoeTopkMethod::kGroupLimitedGreedy ? P::Groups::kMax
             : m.topk_method == MoeTopkMethod::kNoauxTc          ? P::Groups::kTop2Sum
                                                                 : P::Groups::kNone;
  p.num_experts = m.num_experts;
  p.top_k = m.top_k;
  p.n_group = m.n_group;
  p.topk_group = m.topk_group;
  p.renormalize = m.norm_topk_prob;
  return p;
}

}  // namespace

StatusOr<std::unique_ptr<MoeBlock>> MoeBlock::Create(const ModelConfig& c, Backend* backend) {
  if (!c.is_moe()) return InvalidArgument("moe: " + c.architecture + " has no MoE layers");
  RETURN_IF_ERROR(backend->CheckMoe());
  std::vector<BackendOp> ops;
  if (c.moe.scoring == MoeScoring::kSoftmaxTopK) ops.push_back(BackendOp::kMoeSoftmaxTopK);
  if (c.moe.scoring == MoeScoring::kSigmoid || c.moe.topk_method != MoeTopkMethod::kGreedy ||
      c.moe.score_correction_bias) {
    ops.push_back(BackendOp::kMoeGroupedRoute);
  }
  if (c.moe.expert_bias) ops.push_back(BackendOp::kMoeExpertBias);
  if (c.moe.activation == MoeActivation::kSwigluOai) ops.push_back(BackendOp::kSwigluOai);
  if (c.moe.shared_inter > 0 && !c.moe.shared_gate) ops.push_back(BackendOp::kAdd);
  for (BackendOp op : ops) {
    Status s = backend->CheckOp(op);
    if (!s.ok()) return Unimplemented(c.architecture + " needs the " + BackendOpName(op) + " op: " + s.message());
  }
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
  b->route_ = RouteParams(c.moe);
  for (MoeLayerWeights& w : b->weights_) {
    MoeExpertWeights& x = w.experts;
    x.num_experts = c.moe.num_experts;
    x.hidden = c.hidden_size;
    x.inter = c.moe.expert_inter;
    x.gate.resize(x.num_experts);
    x.up.resize(x.num_experts);
    x.down.resize(x.num_experts);
    if (c.moe.expert_bias) {
      x.gate_bias.resize(x.num_experts);
      x.up_bias.resize(x.num_experts);
      x.down_bias.resize(x.num_experts);
    }
    x.swiglu_oai = c.moe.activation == MoeActivation::kSwigluOai;
    x.swiglu_alpha = static_cast<float>(c.moe.swiglu_alpha);
    x.swiglu_limit = static_cast<float>(c.moe.swiglu_limit);
  }
  const int64_t count_bytes = static_cast<int64_t>(b->moe_layers_.size()) * c.moe.num_experts * 8;
  ASSIGN_OR_RETURN(b->counts_, backend->Allocate(count_bytes));  // zeroed
  return b;
}

Status MoeBlock::BindVector(const WeightSpec& spec, std::shared_ptr<void> data, const std::string& file) {
  if (spec.layer < 0 || spec.layer >= config_.num_layers || moe_index_[spec.layer] < 0 ||
      (spec.IsExpert() && spec.expert >= config_.moe.num_experts)) {
    return InvalidArgument(file + ": tensor '" + spec.name + "' belongs to no MoE layer or expert");
  }
  MoeLayerWeights& L = weights_[moe_index_[spec.layer]];
  const WeightView v{data.get(), DType::kF32, 1, spec.shape[0]};
  using R = WeightRole;
  const bool expert_bias =
      spec.role == R::kExpertGateBias || spec.role == R::kExpertUpBias || spec.role == R::kExpertDownBias;
  if (expert_bias && !config_.moe.expert_bias) {
    return InvalidArgument(file + ": tensor '" + spec.name + "': the config has no expert biases");
  }
  switch (spec.role) {
    case R::kRouterBias: L.router_bias = data; break;
    case R::kScoreBias: L.score_bias = data; break;
    case R::kExpertGateBias: L.experts.gate_bias[spec.expert] = v; break;
    case R::kExpertUpBias: L.experts.up_bias[spec.expert] = v; break;
    case R::kExpertDownBias: L.experts.down_bias[spec.expert] = v; break;
    default: return InvalidArgument(file + ": tensor '" + spec.name + "' is not an MoE vector");
  }
  vectors_.push_back(std::move(data));
  return Status::Ok();
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
    x.swiglu_oai = all.swiglu_oai;
    x.swiglu_alpha = all.swiglu_alpha;
    x.swiglu_limit = all.swiglu_limit;
    MoeExpertWeights& src = weights_[i].experts;
    const std::vector<std::vector<WeightView>*> from = src.Tables(), to = x.Tables();
    for (int64_t e : ep_->SlotExperts(static_cast<int64_t>(i))) {
      for (size_t k = 0; k < from.size(); ++k) {
        if (!from[k]->empty()) to[k]->push_back((*from[k])[e]);
      }
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
    bool missing = L.router.empty() || (m.router_bias && !L.router_bias) ||
                   (m.score_correction_bias && !L.score_bias);
    MoeExpertWeights& held = ep_ ? local_[i] : weights_[i].experts;
    for (const std::vector<WeightView>* table : held.Tables()) {
      for (const WeightView& v : *table) missing |= v.empty();
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
    b.Linear(x, t, L.router, F(L.router_bias), F(ws_.logits), m.num_experts);
    MoeRouteParams route = route_;
    route.selection_bias = F(L.score_bias);
    b.MoeRoute(F(ws_.logits), t, route, ids, F(ws_.weights));
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
  } else {
    b.Add(out, F(ws_.shared_out), t * h);  // a shared expert without a gate (DeepSeek): a plain add
  }
}

int64_t MoeBlock::expert_bytes() const {
  if (weights_.empty()) return 0;
  MoeExpertWeights x = ep_ ? local_[0] : weights_[0].experts;
  int64_t bytes = 0;
  for (const std::vector<WeightView>* table : x.Tables()) bytes += table->empty() ? 0 : (*table)[0].bytes();
  return bytes;
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
