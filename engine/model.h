// Model: a decoder (Llama/Mistral/Qwen2/Qwen3, and with MoE layers Mixtral/
// Qwen2-MoE/Qwen3-MoE through engine/moe/; DeepSeek-V2/V3's latent attention through
// engine/mla/) bound to a Backend.
//
// Forward() runs one flattened varlen batch (prefill chunks and decode tokens of
// many sequences together) over a paged KV cache and returns logits only at the
// requested token rows. Batch-invariant on the CPU backend: a sequence's logits
// do not depend on what else is in the batch or how its prompt was chunked.
// Thread safety: one Forward at a time (the engine loop thread).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/forward_batch.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/mla/mla_attention.h"
#include "engine/moe/moe_block.h"
#include "engine/parallel/shard/model_shard.h"
#include "engine/rope.h"

namespace tessera {

class WeightSource;

struct LayerWeights {
  WeightView q, k, v, o, gate, up, down;
  // Small f32 parameters in backend memory (null when the model has none).
  std::shared_ptr<void> input_norm, post_norm, q_norm, k_norm;
  std::shared_ptr<void> attn_out_norm, ffn_out_norm;  // sandwich norms (Gemma); null otherwise
  std::shared_ptr<void> q_bias, k_bias, v_bias, o_bias, gate_bias, up_bias, down_bias;
  std::shared_ptr<void> sinks;  // f32 [q heads] attention sink logits (gpt-oss); null otherwise
};

class Model {
 public:
  // Loads an HF checkpoint directory (config.json + safetensors), a .gguf
  // file, or a directory holding exactly one .gguf and no safetensors,
  // validating every tensor's presence, dtype and shape.
  // With `parallel`, the model is one rank of a tensor/expert-parallel group
  // (engine/parallel/shard): it loads only its slices and its forward runs the
  // collectives, so every rank of the group must call Forward in lockstep.
  static StatusOr<std::unique_ptr<Model>> Load(const std::string& model_path, Backend* backend,
                                               const parallel::ParallelSetup* parallel = nullptr);
  ~Model();

  const ModelConfig& config() const { return config_; }
  Backend* backend() const { return backend_; }
  int64_t weight_bytes() const { return weight_bytes_; }

  StatusOr<std::unique_ptr<KvCache>> CreateKvCache(int64_t num_blocks, int64_t block_size) const {
    return KvCache::Create(local_, backend_, num_blocks, block_size);  // this rank's KV heads
  }
  // Parallel rank: the shard (plan, collective time); null for one rank.
  const parallel::ModelShard* shard() const { return shard_.get(); }
  // Data-parallel attention ranks whose share of a step has no sequence: takes
  // part in the step's collectives (each MoE layer's all-to-alls) with no tokens.
  Status ForwardIdle();
  // Parallel ranks, every rank after every step (ShardedForward calls it): the
  // group's expert load gathered and, when an EPLB interval ends, the experts
  // rebalanced (collective).
  Status FinishParallelStep();

  // Runs the batch; `logits` receives [batch.logits_indices.size(), vocab] f32.
  // Fails with the backend's first asynchronous error (Backend::TakeError).
  Status Forward(const ForwardBatch& batch, KvCache* cache, std::vector<float>* logits);

  // The deployment's longest sequence, once, before serving (every rank of a
  // parallel group alike). LongRoPE models choose their short or long factors
  // from it (engine/rope.h UseLongRopeFactors) and log the choice; until called,
  // max_position_embeddings stands in. Other models ignore it.
  Status SetMaxModelLen(int64_t max_model_len);

  // Decode steps (each sequence one token, at most the largest size) then run
  // as graphs captured once per padded batch size (GraphBatchSizes), with fixed
  // step-input buffers and block tables ceil(max_model_len / block_size) wide.
  // Needs Backend::SupportsGraphs(). Positions must stay below max_model_len.
  Status EnableGraphs(int64_t max_num_seqs, int64_t max_model_len, int64_t block_size);
  int64_t num_captured_graphs() const;
  // 1, 2, 4, 8, 16, 24, 32, 48, ..., 256 below max_num_seqs, then max_num_seqs (<= 256).
  static std::vector<int64_t> GraphBatchSizes(int64_t max_num_seqs);

  // Runs one dummy forward of `tokens` tokens (split into sequences of at most
  // max_model_len, at least min(max_num_seqs, tokens) of them, logits for each)
  // and one decode step of min(max_num_seqs, 256) sequences at position
  // max_model_len - 1, on a temporary KV cache, so workspaces reach their largest
  // size; for sizing the KV pool from what remains of device memory.
  Status ProfileForward(int64_t tokens, int64_t max_num_seqs, int64_t max_model_len, int64_t block_size);

  // MoE models: tokens routed to each expert of each MoE layer by the forward
  // passes since load (ProfileForward's excluded); empty for dense models.
  // Copies from the backend (a sync on CUDA); call between forwards.
  StatusOr<ExpertLoad> ReadExpertLoad() const;
  // MoE models: bytes of one routed expert (its three matrices); 0 for dense.
  int64_t expert_bytes() const { return moe_ ? moe_->expert_bytes() : 0; }

 private:
  Model() = default;
  Status BindWeights();
  Status CheckBatch(const ForwardBatch& b, const KvCache& cache) const;
  Status EnsureWorkspace(int64_t tokens, int64_t logit_rows);
  Status EnsureRope(int64_t positions);
  Status UploadStep(const ForwardBatch& b);
  // The whole network on the current step's device inputs (d_*, step_*).
  void RunLayers(int64_t tokens, int64_t logit_rows, KvCache* cache);
  void AttentionBlock(int64_t layer, int64_t tokens, KvCache* cache);
  // The current step's attention inputs for `layer` (positions, block tables, window, scale).
  AttentionParams StepAttentionParams(int64_t layer, int64_t tokens, const KvCache& cache) const;
  void MlpBlock(int64_t layer, int64_t tokens);
  // Index into graphs_.sizes for this batch, or -1 when it must run eagerly.
  int64_t GraphSlot(const ForwardBatch& b) const;
  Status ForwardGraph(const ForwardBatch& b, int64_t slot, KvCache* cache, std::vector<float>* logits);
  void ReleaseGraphs();

  ModelConfig config_;
  ModelConfig local_;  // the dimensions this rank computes (== config_ on one rank)
  std::unique_ptr<parallel::ModelShard> shard_;  // null on one rank
  std::string dir_;
  Backend* backend_ = nullptr;  // not owned
  std::unique_ptr<WeightSource> source_;
  std::vector<LayerWeights> layers_;
  std::unique_ptr<MoeBlock> moe_;  // MoE layers' FFN; null for dense models
  std::unique_ptr<MlaAttention> mla_;  // every layer's attention when the config's kind is MLA; else null
  WeightView embed_, lm_head_;
  std::shared_ptr<void> final_norm_;
  int64_t weight_bytes_ = 0;
  // RoPE tables by ModelConfig::layer_rope index (0: rope_theta + rope_scaling; 1: the
  // local base, when rope_local_theta > 0), and their device copies.
  std::vector<std::unique_ptr<RopeTable>> ropes_;
  std::vector<std::shared_ptr<void>> rope_devices_;
  bool rope_long_ = false;  // longrope (table 0): the long factors are in use
  int64_t rope_device_positions_ = 0;

  // Per-step workspace in backend memory, grown to the largest batch seen.
  struct Workspace {
    int64_t token_capacity = 0;
    int64_t logit_capacity = 0;
    int64_t meta_capacity = 0;
    std::shared_ptr<void> residual, hidden, qkv, attn, gate_up, act, mlp_out, gathered, logits;
    std::shared_ptr<void> meta;  // ids, positions, token_to_seq, slots, block tables, logit rows
  } ws_;
  // Device pointers into ws_.meta for the current step.
  const int32_t* d_ids_ = nullptr;
  const int32_t* d_positions_ = nullptr;
  const int32_t* d_token_to_seq_ = nullptr;
  const int64_t* d_slots_ = nullptr;
  const int32_t* d_block_tables_ = nullptr;
  const int32_t* d_logit_rows_ = nullptr;
  int64_t step_max_blocks_ = 0;
  const int32_t* step_host_ids_ = nullptr;
  const int32_t* step_host_positions_ = nullptr;  // host views of the current step
  const int32_t* step_host_token_to_seq_ = nullptr;
  int64_t step_max_context_ = 0;

  // Decode graphs (EnableGraphs). Step inputs live at fixed addresses in `meta`.
  struct Graphs {
    bool enabled = false;
    std::vector<int64_t> sizes;
    std::vector<int64_t> handles;  // per size; -1: not captured yet
    int64_t width = 0;             // block-table columns
    int64_t max_model_len = 0;
    const KvCache* cache = nullptr;  // the cache the captured graphs write
    std::shared_ptr<void> meta;
    int32_t *ids = nullptr, *positions = nullptr, *seqs = nullptr, *tables = nullptr, *rows = nullptr;
    int64_t* slots = nullptr;
    std::vector<int32_t> h_ids, h_positions, h_seqs, h_tables, h_rows;  // host staging
    std::vector<int64_t> h_slots;
  } graphs_;
};

}  // namespace tessera
