#include "engine/model.h"
#include "common/log.h"

#include <cmath>
#include <cstring>
#include <utility>


#include "engine/gguf_model.h"
#include "engine/safetensors.h"
#include "engine/stacked_experts.h"
#include "engine/weight_source.h"
#include "engine/weight_specs.h"

namespace tessera {
namespace {

float* F(const std::shared_ptr<void>& p) { return static_cast<float*>(p.get()); }

// Safetensors checkpoint directory as a WeightSource.
class SafetensorsSource : public WeightSource {
 public:
  SafetensorsSource(std::unique_ptr<WeightStore> store, int64_t num_experts)
      : store_(std::move(store)), num_experts_(num_experts) {}
  StatusOr<SourceTensor> Get(const WeightSpec& spec) override {
    if (spec.stacked) return ReadStackedExpert(*store_, spec, num_experts_, &owned_);
    const std::vector<int64_t> s = spec.StoredShape();
    StatusOr<const SafetensorsTensor*> t = s.size() == 1 ? store_->Require(spec.name, {s[0]})
                                                         : store_->Require(spec.name, {s[0], s[1]});
    if (!t.ok()) return t.status();
    return FusedPart(spec, {(*t)->data, *(*t)->dtype, static_cast<int64_t>((*t)->nbytes()), (*t)->file});
  }

 private:
  std::unique_ptr<WeightStore> store_;
  const int64_t num_experts_;
  std::vector<std::unique_ptr<uint8_t[]>> owned_;  // stacked experts' per-expert copies
};

// The optional backend ops (BackendOp) this config's forward pass calls.
Status CheckBackendOps(const ModelConfig& c, const Backend& backend) {
  std::vector<BackendOp> ops;
  if (c.hidden_act == GluActivation::kGeluTanh) ops.push_back(BackendOp::kGeluTanhMul);
  if (c.embedding_scale != 1.0 || c.moe.routed_scaling_factor != 1.0) ops.push_back(BackendOp::kScale);
  if (c.final_logit_softcapping > 0) ops.push_back(BackendOp::kSoftCap);
  if (c.attn_logit_softcapping > 0) ops.push_back(BackendOp::kAttentionSoftCap);
  if (c.attn_sinks) ops.push_back(BackendOp::kAttentionSinks);
  if (c.attention == AttentionKind::kMla) ops.push_back(BackendOp::kMlaAttention);
  for (BackendOp op : ops) {
    Status s = backend.CheckOp(op);
    if (!s.ok()) return Unimplemented(c.architecture + " needs the " + BackendOpName(op) + " op: " + s.message());
  }
  return Status::Ok();
}

}  // namespace

Model::~Model() = default;

StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& model_path, Backend* backend,
                                             const parallel::ParallelSetup* parallel) {
  auto m = std::unique_ptr<Model>(new Model());
  m->dir_ = model_path;
  m->backend_ = backend;
  ASSIGN_OR_RETURN(std::string gguf, ResolveGgufPath(model_path));
  if (!gguf.empty()) {
    ASSIGN_OR_RETURN(auto src, GgufWeightSource::Open(gguf, &m->config_));
    m->source_ = std::move(src);
  } else {
    ASSIGN_OR_RETURN(m->config_, LoadModelConfig(model_path));
    ASSIGN_OR_RETURN(auto store, WeightStore::Open(model_path));
    // Gemma 3 with a vision tower: the published checkpoints name the decoder
    // language_model.model.*, transformers >= 4.52 saves it as model.language_model.*.
    const std::string kNewPrefix = "model.language_model.";
    if (m->config_.has_vision_tower && store->Find(m->config_.weight_prefix + "embed_tokens.weight") == nullptr &&
        store->Find(kNewPrefix + "embed_tokens.weight") != nullptr) {
      m->config_.weight_prefix = kNewPrefix;
    }
    m->source_ = std::make_unique<SafetensorsSource>(std::move(store), m->config_.moe.num_experts);
  }
  RETURN_IF_ERROR(backend->CheckHeadDim(m->config_.head_dim));
  RETURN_IF_ERROR(CheckBackendOps(m->config_, *backend));
  if (m->config_.has_vision_tower) {
    LogInfo("model: {} has a vision tower; loading the text decoder only (images are not supported)",
            m->config_.architecture);
  }
  m->local_ = m->config_;
  if (parallel != nullptr && m->config_.attention == AttentionKind::kMla && parallel->shard.world_size > 1 &&
      !parallel->shard.data_parallel_attention) {
    // ShardPlan splits K/V heads; the latent would have to be replicated instead. Data-parallel
    // attention replicates every attention weight, so expert parallelism runs with it.
    return Unimplemented(m->config_.architecture + ": multi-head latent attention is not split across ranks yet "
                         "(--tensor-parallel-size must be 1; expert parallelism needs --data-parallel-size)");
  }
  if (parallel != nullptr) {
    ASSIGN_OR_RETURN(m->shard_, parallel::ModelShard::Create(m->config_, *parallel, backend));
    m->local_ = m->shard_->local_config();
  }
  RETURN_IF_ERROR(m->BindWeights());
  m->ropes_.push_back(std::make_unique<RopeTable>(m->config_));
  if (m->config_.rope_local_theta > 0) {  // Gemma 3's sliding layers: own base, no scaling
    ModelConfig local = m->config_;
    local.rope_theta = local.rope_local_theta;
    local.rope_scaling = RopeScaling{};
    m->ropes_.push_back(std::make_unique<RopeTable>(local));
  }
  m->rope_long_ = UseLongRopeFactors(m->config_, 0);
  m->rope_devices_.resize(m->ropes_.size());
  RETURN_IF_ERROR(backend->TakeError());
  LogInfo("model: {} ({:.2f} GB of weights on {})", m->config_.Summary(),
          static_cast<double>(m->weight_bytes_) / 1e9, backend->name());
  return m;
}

Status Model::BindWeights() {
  const ModelConfig& c = config_;
  auto matrix = [&](const WeightSpec& spec, WeightView* out) -> Status {
    ASSIGN_OR_RETURN(SourceTensor t, source_->Get(spec));
    WeightView host{t.data, t.dtype, spec.shape[0], spec.shape[1]};
    if (shard_) {
      ASSIGN_OR_RETURN(host, shard_->LoadMatrix(spec, t));  // the rank's slice; empty: none
      if (host.empty()) return Status::Ok();
    }
    ASSIGN_OR_RETURN(*out, backend_->UploadWeight(host));
    weight_bytes_ += host.bytes();
    return Status::Ok();
  };
  // Small vectors are converted to f32 and copied to the backend.
  auto vec = [&](const WeightSpec& spec, std::shared_ptr<void>* out) -> Status {
    ASSIGN_OR_RETURN(SourceTensor t, source_->Get(spec));
    const parallel::Range range = shard_ ? shard_->VectorRange(spec) : parallel::Range{0, spec.shape[0]};
    const int64_t len = range.count;
    if (len == 0) return Status::Ok();
    if (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16) {
      return InvalidArgument(t.file + ": tensor '" + spec.name + "' has unsupported dtype " +
                             std::string(DTypeName(t.dtype)));
    }
    std::vector<float> host(len);
    // Gemma's RMSNorm multiplies by (1 + w): folded here, in f32, as transformers
    // computes 1.0 + weight.float().
    const float offset = spec.IsNorm() ? static_cast<float>(c.norm_weight_offset) : 0.0f;
    const auto* bytes = static_cast<const uint8_t*>(t.data) + range.begin * DTypeSize(t.dtype);  // may be unaligned
    for (int64_t i = 0; i < len; ++i) {
      if (t.dtype == DType::kF32) {
        std::memcpy(&host[i], bytes + 4 * i, 4);
      } else {
        uint16_t v;
        std::memcpy(&v, bytes + 2 * i, 2);
        host[i] = t.dtype == DType::kF16 ? F16ToF32(v) : Bf16ToF32(v);
      }
      if (offset != 0.0f) host[i] = offset + host[i];
    }
    ASSIGN_OR_RETURN(*out, backend_->Allocate(len * 4));
    backend_->CopyFromHost(out->get(), host.data(), len * 4);
    weight_bytes_ += t.bytes;
    return Status::Ok();
  };

  layers_.resize(c.num_layers);
  if (c.attention == AttentionKind::kMla) {
    ASSIGN_OR_RETURN(mla_, MlaAttention::Create(local_, backend_));
  }
  // MLA layers: the attention weights go to MlaAttention; *bound false for other roles.
  auto bind_mla = [&](const WeightSpec& spec, bool* bound) -> Status {
    using R = WeightRole;
    MlaLayerWeights* M = mla_->layer(spec.layer);
    *bound = true;
    switch (spec.role) {
      case R::kQ: return matrix(spec, &M->q);
      case R::kQA: return matrix(spec, &M->qa);
      case R::kQB: return matrix(spec, &M->qb);
      case R::kKvA: return matrix(spec, &M->kva);
      case R::kO: return matrix(spec, &M->o);
      case R::kQANorm: return vec(spec, &M->qa_norm);
      case R::kKvANorm: return vec(spec, &M->kva_norm);
      case R::kKvB: {
        ASSIGN_OR_RETURN(SourceTensor t, source_->Get(spec));
        return mla_->BindKvB(spec, t, &weight_bytes_);
      }
      default: *bound = false; return Status::Ok();
    }
  };
  if (c.is_moe()) {
    ASSIGN_OR_RETURN(moe_, MoeBlock::Create(local_, backend_));
    if (shard_ && shard_->plan().expert_parallel()) moe_->SetExpertParallel(shard_.get());
  }
  for (const WeightSpec& spec : ExpectedWeights(c)) {
    // An expert another rank holds: not even read (HF stacked experts are copied out).
    if (shard_ && spec.IsExpert() && !shard_->plan().HoldsExpert(spec.expert)) continue;
    if (spec.IsMoe() && spec.shape.size() == 1) {  // router and expert biases
      std::shared_ptr<void> v;
      RETURN_IF_ERROR(vec(spec, &v));
      if (v) RETURN_IF_ERROR(moe_->BindVector(spec, std::move(v), dir_));
      continue;
    }
    if (spec.IsMoe()) {
      WeightView w;
      RETURN_IF_ERROR(matrix(spec, &w));
      if (w.empty()) continue;  // an expert another rank holds
      RETURN_IF_ERROR(moe_->Bind(spec, w, dir_));
      continue;
    }
    LayerWeights* L = spec.layer >= 0 ? &layers_[spec.layer] : nullptr;
    using R = WeightRole;
    if (mla_ && spec.layer >= 0) {
      bool bound = false;
      Status st = bind_mla(spec, &bound);
      if (!st.ok()) {
        const MlaConfig& m = c.mla;
        return Status(st.code(), st.message() + " (config: kv_lora_rank " + std::to_string(m.kv_lora_rank) +
                                     ", q_lora_rank " + std::to_string(m.q_lora_rank) + ", qk_nope_head_dim " +
                                     std::to_string(m.qk_nope_head_dim) + ", qk_rope_head_dim " +
                                     std::to_string(m.qk_rope_head_dim) + ", v_head_dim " +
                                     std::to_string(m.v_head_dim) + ")");
      }
      if (bound) continue;
    }
    switch (spec.role) {
      case R::kEmbed: RETURN_IF_ERROR(matrix(spec, &embed_)); break;
      case R::kLmHead: RETURN_IF_ERROR(matrix(spec, &lm_head_)); break;
      case R::kFinalNorm: RETURN_IF_ERROR(vec(spec, &final_norm_)); break;
      case R::kInputNorm: RETURN_IF_ERROR(vec(spec, &L->input_norm)); break;
      case R::kPostNorm: RETURN_IF_ERROR(vec(spec, &L->post_norm)); break;
      case R::kQNorm: RETURN_IF_ERROR(vec(spec, &L->q_norm)); break;
      case R::kKNorm: RETURN_IF_ERROR(vec(spec, &L->k_norm)); break;
      case R::kAttnOutNorm: RETURN_IF_ERROR(vec(spec, &L->attn_out_norm)); break;
      case R::kFfnOutNorm: RETURN_IF_ERROR(vec(spec, &L->ffn_out_norm)); break;
      case R::kQ: RETURN_IF_ERROR(matrix(spec, &L->q)); break;
      case R::kK: RETURN_IF_ERROR(matrix(spec, &L->k)); break;
      case R::kV: RETURN_IF_ERROR(matrix(spec, &L->v)); break;
      case R::kO: RETURN_IF_ERROR(matrix(spec, &L->o)); break;
      case R::kQBias: RETURN_IF_ERROR(vec(spec, &L->q_bias)); break;
      case R::kKBias: RETURN_IF_ERROR(vec(spec, &L->k_bias)); break;
      case R::kVBias: RETURN_IF_ERROR(vec(spec, &L->v_bias)); break;
      case R::kOBias: RETURN_IF_ERROR(vec(spec, &L->o_bias)); break;
      case R::kGate: RETURN_IF_ERROR(matrix(spec, &L->gate)); break;
      case R::kUp: RETURN_IF_ERROR(matrix(spec, &L->up)); break;
      case R::kDown: RETURN_IF_ERROR(matrix(spec, &L->down)); break;
      case R::kGateBias: RETURN_IF_ERROR(vec(spec, &L->gate_bias)); break;
      case R::kUpBias: RETURN_IF_ERROR(vec(spec, &L->up_bias)); break;
      case R::kDownBias: RETURN_IF_ERROR(vec(spec, &L->down_bias)); break;
      case R::kSinks: RETURN_IF_ERROR(vec(spec, &L->sinks)); break;
      default: return Internal("model: unhandled weight " + spec.name);
    }
  }
  if (moe_) RETURN_IF_ERROR(moe_->Validate());
  if (mla_) RETURN_IF_ERROR(mla_->Validate());
  if (c.tie_word_embeddings) lm_head_ = embed_;
  return Status::Ok();
}

Status Model::CheckBatch(const ForwardBatch& b, const KvCache& cache) const {
  const int64_t t = b.num_tokens();
  auto sized = [&](size_t n, const char* what) -> Status {
    if (static_cast<int64_t>(n) != t) {
      return InvalidArgument(std::string("forward batch: '") + what + "' has " + std::to_string(n) +
                             " entries, expected one per token (" + std::to_string(t) + ")");
    }
    return Status::Ok();
  };
  if (t == 0) return InvalidArgument("forward batch: no tokens");
  RETURN_IF_ERROR(sized(b.positions.size(), "positions"));
  RETURN_IF_ERROR(sized(b.token_to_seq.size(), "token_to_seq"));
  RETURN_IF_ERROR(sized(b.slot_mapping.size(), "slot_mapping"));
  if (b.num_seqs <= 0 || b.max_blocks_per_seq <= 0 ||
      static_cast<int64_t>(b.block_tables.size()) != b.num_seqs * b.max_blocks_per_seq) {
    return InvalidArgument("forward batch: 'block_tables' must hold num_seqs x max_blocks_per_seq entries");
  }
  for (int32_t blk : b.block_tables) {
    if (blk < -1 || blk >= cache.num_blocks()) {
      return InvalidArgument("forward batch: block id " + std::to_string(blk) + " out of range [0, " +
                             std::to_string(cache.num_blocks()) + ")");
    }
  }
  for (int64_t i = 0; i < t; ++i) {
    if (b.token_ids[i] < 0 || b.token_ids[i] >= config_.vocab_size) {
      return InvalidArgument("forward batch: token id " + std::to_string(b.token_ids[i]) +
                             " out of range [0, " + std::to_string(config_.vocab_size) + ")");
    }
    const int32_t seq = b.token_to_seq[i];
    if (seq < 0 || seq >= b.num_seqs) return InvalidArgument("forward batch: token_to_seq out of range");
    const int64_t pos = b.positions[i];
    if (pos < 0 || pos / cache.block_size() >= b.max_blocks_per_seq ||
        b.block_tables[seq * b.max_blocks_per_seq + pos / cache.block_size()] < 0) {
      return InvalidArgument("forward batch: position " + std::to_string(pos) +
                             " is not covered by its sequence's block table");
    }
    // The slot must be the one the block table gives for this position, since
    // attention reads keys back through the block table.
    const int64_t expect = static_cast<int64_t>(b.block_tables[seq * b.max_blocks_per_seq +
                                                               pos / cache.block_size()]) *
                               cache.block_size() + pos % cache.block_size();
    if (b.slot_mapping[i] != expect) {
      return InvalidArgument("forward batch: slot_mapping[" + std::to_string(i) +
                             "] disagrees with the block table");
    }
  }
  for (int32_t r : b.logits_indices) {
    if (r < 0 || r >= t) return InvalidArgument("forward batch: logits index out of range");
  }
  return Status::Ok();
}

Status Model::EnsureWorkspace(int64_t tokens, int64_t logit_rows) {
  const ModelConfig& c = local_;
  const int64_t qkv_cols = (c.num_q_heads + 2 * c.num_kv_heads) * c.head_dim;
  if (tokens > ws_.token_capacity) {
    ReleaseGraphs();  // captured graphs point into the old buffers
    const int64_t cap = std::max<int64_t>(tokens, 16);
    auto alloc = [&](int64_t floats, std::shared_ptr<void>* p) -> Status {
      p->reset();  // free first: device memory may not hold old and new together
      ASSIGN_OR_RETURN(*p, backend_->Allocate(floats * 4));
      return Status::Ok();
    };
    RETURN_IF_ERROR(alloc(cap * c.hidden_size, &ws_.residual));
    RETURN_IF_ERROR(alloc(cap * c.hidden_size, &ws_.hidden));
    RETURN_IF_ERROR(alloc(cap * qkv_cols, &ws_.qkv));
    RETURN_IF_ERROR(alloc(cap * c.num_q_heads * c.head_dim, &ws_.attn));
    RETURN_IF_ERROR(alloc(cap * 2 * c.intermediate_size, &ws_.gate_up));
    RETURN_IF_ERROR(alloc(cap * c.intermediate_size, &ws_.act));
    RETURN_IF_ERROR(alloc(cap * c.hidden_size, &ws_.mlp_out));
    if (moe_) RETURN_IF_ERROR(moe_->EnsureWorkspace(cap));
    if (mla_) RETURN_IF_ERROR(mla_->EnsureWorkspace(cap));
    ws_.token_capacity = cap;
  }
  if (logit_rows > ws_.logit_capacity) {
    ReleaseGraphs();
    ws_.gathered.reset();
    ws_.logits.reset();
    ASSIGN_OR_RETURN(ws_.gathered, backend_->Allocate(logit_rows * c.hidden_size * 4));
    ASSIGN_OR_RETURN(ws_.logits, backend_->Allocate(logit_rows * c.vocab_size * 4));
    ws_.logit_capacity = logit_rows;
  }
  return Status::Ok();
}

Status Model::SetMaxModelLen(int64_t max_model_len) {
  const ModelConfig& c = config_;
  if (c.rope_scaling.type != RopeScalingType::kLongRope) return Status::Ok();
  if (max_model_len <= 0) return InvalidArgument("model: max model length must be positive");
  const bool use_long = UseLongRopeFactors(c, max_model_len);
  LogInfo("rope: LongRoPE {} factors for every sequence (max model length {} {} original context {}; "
          "attention factor {:.4f})",
          use_long ? "long" : "short", max_model_len, use_long ? ">" : "<=",
          c.rope_scaling.original_max_position_embeddings,
          ComputeRopeFrequencies(c, max_model_len).attention_factor);
  if (use_long == rope_long_) return Status::Ok();
  ReleaseGraphs();  // captured graphs read the old table's device copy
  ropes_[0] = std::make_unique<RopeTable>(c, max_model_len);  // table 0 carries rope_scaling
  rope_long_ = use_long;
  rope_device_positions_ = 0;  // every table re-uploads on the next EnsureRope
  return Status::Ok();
}

Status Model::EnsureRope(int64_t positions) {
  if (positions <= rope_device_positions_) return Status::Ok();
  ReleaseGraphs();
  for (size_t i = 0; i < ropes_.size(); ++i) {
    RopeTable& rope = *ropes_[i];
    rope.EnsurePositions(positions);
    const int64_t bytes = rope.num_positions() * rope.rot_dim() * 4;
    rope_devices_[i].reset();
    ASSIGN_OR_RETURN(rope_devices_[i], backend_->Allocate(bytes));
    backend_->CopyFromHost(rope_devices_[i].get(), rope.data(), bytes);
    rope_device_positions_ = rope.num_positions();  // every table grows alike
  }
  return Status::Ok();
}

// Step metadata, packed into one backend buffer (grown as needed).
Status Model::UploadStep(const ForwardBatch& b) {
  const int64_t tokens = b.num_tokens();
  const int64_t logit_rows = static_cast<int64_t>(b.logits_indices.size());
  const int64_t meta_bytes = tokens * (4 * 3 + 8) + static_cast<int64_t>(b.block_tables.size()) * 4 +
                             logit_rows * 4 + 64;
  if (meta_bytes > ws_.meta_capacity) {
    ASSIGN_OR_RETURN(ws_.meta, backend_->Allocate(2 * meta_bytes));
    ws_.meta_capacity = 2 * meta_bytes;
  }
  char* base = static_cast<char*>(ws_.meta.get());
  int64_t off = 0;
  auto put = [&](const void* src, int64_t bytes) {
    char* dst = base + off;
    if (bytes > 0) backend_->CopyFromHost(dst, src, bytes);
    off += (bytes + 7) / 8 * 8;
    return dst;
  };
  d_slots_ = reinterpret_cast<const int64_t*>(put(b.slot_mapping.data(), tokens * 8));
  d_ids_ = reinterpret_cast<const int32_t*>(put(b.token_ids.data(), tokens * 4));
  step_host_ids_ = b.token_ids.data();
  d_positions_ = reinterpret_cast<const int32_t*>(put(b.positions.data(), tokens * 4));
  d_token_to_seq_ = reinterpret_cast<const int32_t*>(put(b.token_to_seq.data(), tokens * 4));
  d_block_tables_ =
      reinterpret_cast<const int32_t*>(put(b.block_tables.data(), static_cast<int64_t>(b.block_tables.size()) * 4));
  d_logit_rows_ = reinterpret_cast<const int32_t*>(put(b.logits_indices.data(), logit_rows * 4));
  step_max_blocks_ = b.max_blocks_per_seq;
  step_host_positions_ = b.positions.data();
  step_host_token_to_seq_ = b.token_to_seq.data();
  int64_t max_pos = 0;
  for (int32_t p : b.positions) max_pos = std::max<int64_t>(max_pos, p);
  step_max_context_ = max_pos + 1;
  return Status::Ok();
}

AttentionParams Model::StepAttentionParams(int64_t li, int64_t t, const KvCache& cache) const {
  const ModelConfig& c = local_;
  AttentionParams p;
  p.num_tokens = t;
  p.num_q_heads = c.num_q_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = c.head_dim;
  p.block_size = cache.block_size();
  p.sliding_window = c.layer_sliding_window[li];
  const double qpas = c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : static_cast<double>(c.head_dim);
  p.scale = static_cast<float>(c.attn_scale > 0 ? c.attn_scale : 1.0 / std::sqrt(qpas));
  p.softcap = static_cast<float>(c.attn_logit_softcapping);
  p.positions = d_positions_;
  p.token_to_seq = d_token_to_seq_;
  p.block_tables = d_block_tables_;
  p.max_blocks_per_seq = step_max_blocks_;
  p.host_positions = step_host_positions_;
  p.host_token_to_seq = step_host_token_to_seq_;
  p.max_context = step_max_context_;
  return p;
}

void Model::AttentionBlock(int64_t li, int64_t t, KvCache* cache) {
  const ModelConfig& c = local_;
  if (mla_) {  // o_proj output to mlp_out, as below
    mla_->Forward(li, F(ws_.hidden), t, F(rope_devices_[c.layer_rope[li]]), d_slots_, cache->layer(li),
                  StepAttentionParams(li, t, *cache), F(ws_.mlp_out));
    return;
  }
  const LayerWeights& L = layers_[li];
  const int64_t d = c.head_dim;
  const int64_t q_cols = c.num_q_heads * d, kv_cols = c.num_kv_heads * d;
  const int64_t ld = q_cols + 2 * kv_cols;  // q | k | v packed per token row
  const float eps = static_cast<float>(c.rms_norm_eps);
  float* qkv = F(ws_.qkv);
  float* q = qkv;
  float* k = qkv + q_cols;
  float* v = qkv + q_cols + kv_cols;
  const float* x = F(ws_.hidden);
  backend_->Linear(x, t, L.q, F(L.q_bias), q, ld);
  backend_->Linear(x, t, L.k, F(L.k_bias), k, ld);
  backend_->Linear(x, t, L.v, F(L.v_bias), v, ld);
  if (c.qk_norm) {
    // Per-head RMSNorm over head_dim, in place in the strided q/k rows.
    backend_->HeadRmsNorm(q, t, c.num_q_heads, d, ld, F(L.q_norm), eps);
    backend_->HeadRmsNorm(k, t, c.num_kv_heads, d, ld, F(L.k_norm), eps);
  }
  const float* cos_sin = F(rope_devices_[c.layer_rope[li]]);
  const int64_t rot = ropes_[c.layer_rope[li]]->rot_dim();  // partial rotary: only the leading dims turn
  backend_->Rope(q, t, c.num_q_heads, d, ld, rot, d_positions_, cos_sin);
  backend_->Rope(k, t, c.num_kv_heads, d, ld, rot, d_positions_, cos_sin);
  const KvLayerView kv = cache->layer(li);
  backend_->WriteKv(k, ld, v, ld, t, c.num_kv_heads, d, d_slots_, kv);
  AttentionParams p = StepAttentionParams(li, t, *cache);
  p.sinks = F(L.sinks);
  backend_->Attention(q, ld, kv, p, F(ws_.attn));
  // o_proj output goes to mlp_out, added to the residual by the next AddRmsNorm.
  backend_->Linear(F(ws_.attn), t, L.o, F(L.o_bias), F(ws_.mlp_out), c.hidden_size);
  if (shard_ && shard_->plan().tensor_parallel()) shard_->ReduceSum(F(ws_.mlp_out), t * c.hidden_size);
}

void Model::MlpBlock(int64_t li, int64_t t) {
  const ModelConfig& c = local_;
  const LayerWeights& L = layers_[li];
  const int64_t inter = c.intermediate_size;
  float* gate_up = F(ws_.gate_up);
  backend_->Linear(F(ws_.hidden), t, L.gate, F(L.gate_bias), gate_up, 2 * inter);
  backend_->Linear(F(ws_.hidden), t, L.up, F(L.up_bias), gate_up + inter, 2 * inter);
  if (c.hidden_act == GluActivation::kGeluTanh) {
    backend_->GeluTanhMul(gate_up, t, inter, F(ws_.act));
  } else {
    backend_->SiluMul(gate_up, t, inter, F(ws_.act));
  }
  backend_->Linear(F(ws_.act), t, L.down, F(L.down_bias), F(ws_.mlp_out), c.hidden_size);
  if (shard_ && shard_->plan().tensor_parallel()) shard_->ReduceSum(F(ws_.mlp_out), t * c.hidden_size);
}

void Model::RunLayers(int64_t t, int64_t rows, KvCache* cache) {
  const ModelConfig& c = config_;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t h = c.hidden_size;
  // residual = embed(ids); each sub-block's output lands in mlp_out and is
  // folded into the residual by the following AddRmsNorm.
  const bool tp = shard_ && shard_->plan().tensor_parallel();
  if (tp) {
    shard_->Embed(embed_, step_host_ids_, t, F(ws_.residual));  // vocab-parallel
  } else {
    backend_->Embedding(embed_, d_ids_, t, F(ws_.residual));
  }
  if (c.embedding_scale != 1.0) backend_->Scale(F(ws_.residual), t * h, static_cast<float>(c.embedding_scale));
  for (int64_t li = 0; li < c.num_layers; ++li) {
    const LayerWeights& L = layers_[li];
    if (li == 0) {
      backend_->RmsNorm(F(ws_.residual), F(L.input_norm), t, h, eps, F(ws_.hidden));
    } else {
      backend_->AddRmsNorm(F(ws_.residual), F(ws_.mlp_out), F(L.input_norm), t, h, eps, F(ws_.hidden));
    }
    AttentionBlock(li, t, cache);
    // Sandwich norms (Gemma): each sub-block's output is normed (in place) before the
    // residual add that the next AddRmsNorm performs.
    if (L.attn_out_norm) backend_->RmsNorm(F(ws_.mlp_out), F(L.attn_out_norm), t, h, eps, F(ws_.mlp_out));
    backend_->AddRmsNorm(F(ws_.residual), F(ws_.mlp_out), F(L.post_norm), t, h, eps, F(ws_.hidden));
    if (c.layer_moe[li]) {
      moe_->Forward(li, F(ws_.hidden), t, F(ws_.mlp_out));
      // Expert-inter slices (TP without EP) are partial sums; EP outputs are whole.
      if (tp && !shard_->plan().expert_parallel()) shard_->ReduceSum(F(ws_.mlp_out), t * h);
    } else {
      MlpBlock(li, t);
    }
    if (L.ffn_out_norm) backend_->RmsNorm(F(ws_.mlp_out), F(L.ffn_out_norm), t, h, eps, F(ws_.mlp_out));
  }
  backend_->AddRmsNorm(F(ws_.residual), F(ws_.mlp_out), F(final_norm_), t, h, eps, F(ws_.hidden));
  if (rows == 0) return;
  backend_->GatherRows(F(ws_.hidden), h, d_logit_rows_, rows, F(ws_.gathered));
  if (tp) {
    shard_->LmHead(F(ws_.gathered), rows, lm_head_, F(ws_.logits));  // vocab-parallel, all-gathered
  } else {
    backend_->Linear(F(ws_.gathered), rows, lm_head_, nullptr, F(ws_.logits), c.vocab_size);
  }
  if (c.final_logit_softcapping > 0) {
    backend_->SoftCap(F(ws_.logits), rows * c.vocab_size, static_cast<float>(c.final_logit_softcapping));
  }
}

Status Model::Forward(const ForwardBatch& b, KvCache* cache, std::vector<float>* logits) {
  RETURN_IF_ERROR(CheckBatch(b, *cache));
  RETURN_IF_ERROR(backend_->TakeError());  // nothing may be left from an earlier failed step
  if (graphs_.enabled) {
    const int64_t slot = GraphSlot(b);
    if (slot >= 0) return ForwardGraph(b, slot, cache, logits);
  }
  const ModelConfig& c = config_;
  const int64_t t = b.num_tokens();
  const int64_t rows = static_cast<int64_t>(b.logits_indices.size());
  RETURN_IF_ERROR(EnsureWorkspace(t, rows));
  int64_t max_pos = 0;
  for (int32_t p : b.positions) max_pos = std::max<int64_t>(max_pos, p);
  RETURN_IF_ERROR(EnsureRope(max_pos + 1));
  RETURN_IF_ERROR(UploadStep(b));
  RunLayers(t, rows, cache);
  logits->resize(static_cast<size_t>(rows * c.vocab_size));
  if (rows > 0) backend_->CopyToHost(logits->data(), ws_.logits.get(), rows * c.vocab_size * 4);
  if (shard_) RETURN_IF_ERROR(shard_->TakeError());
  return backend_->TakeError();
}

Status Model::ForwardIdle() {
  if (!shard_) return FailedPrecondition("model: ForwardIdle is for parallel ranks");
  if (moe_) {
    for (int64_t li = 0; li < config_.num_layers; ++li) {
      if (config_.layer_moe[li]) moe_->Forward(li, nullptr, 0, nullptr);
    }
  }
  return shard_->TakeError();
}

Status Model::FinishParallelStep() {
  if (!shard_) return Status::Ok();
  bool rebalance = false;
  shard_->FinishStep(&rebalance);
  if (rebalance && moe_) RETURN_IF_ERROR(moe_->Rebalance());
  return shard_->TakeError();
}

StatusOr<ExpertLoad> Model::ReadExpertLoad() const {
  if (!moe_) return ExpertLoad{};
  return moe_->ReadExpertLoad();
}

}  // namespace tessera
