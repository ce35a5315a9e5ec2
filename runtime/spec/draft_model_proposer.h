// DraftModelProposer: a smaller model with the target's vocabulary, loaded on
// the target's backend, proposing k tokens autoregressively for all
// speculating sequences at once: one batched forward per draft position.
//
// Its KV cache has the target's block count and block size and is addressed
// through the target's block tables (the scheduler allocates once for both),
// so prefix-cache hits, forks (copy-on-write, mirrored by CopyBlocks) and
// preemption carry over. Invariant: after each Propose, the draft's KV holds
// every position the target computed, for every sequence the step ran (the
// first pass "catches up" on them — prefill chunks included — and appends the
// newest token); so the draft model also runs over every prompt token, at the
// draft/target size ratio of the prefill cost (as vLLM's draft-model path).
// Cost per step: k forwards of the draft model, the first over the step's
// tokens, the others over one token per speculating sequence.
// Engine-loop thread only (one Forward at a time).
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "engine/kv_cache.h"
#include "engine/model.h"
#include "runtime/spec/proposer.h"

namespace tessera {

class DraftModelProposer : public Proposer {
 public:
  // Loads `draft_path` on `backend` (not owned; outlives this). INVALID_ARGUMENT
  // naming `model` when the vocabulary differs from the target's
  // (`target_path`: HF tokenizer.json files, where both have one, must match).
  static StatusOr<std::unique_ptr<DraftModelProposer>> Create(const std::string& draft_path,
                                                              const std::string& target_path,
                                                              const ModelConfig& target, Backend* backend,
                                                              int64_t num_blocks, int64_t block_size);

  Status Propose(std::span<const DraftInput> inputs, std::vector<Draft>* drafts) override;
  Status CopyBlocks(std::span<const CopyOp> copies) override;
  void Forget(SeqId seq) override { computed_.erase(seq); }

  const ModelConfig& config() const { return model_->config(); }
  int64_t kv_cache_bytes() const { return cache_->bytes(); }

 private:
  DraftModelProposer() = default;
  Status ProposeImpl(std::span<const DraftInput> inputs, std::vector<Draft>* drafts);
  // Draws the next draft of input `in` from a draft logits row.
  void Draw(const DraftInput& in, std::span<const float> row, Draft* d);

  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> cache_;
  Sampler sampler_;
  std::vector<float> logits_;
  std::unordered_map<SeqId, int64_t> computed_;  // positions with valid draft KV, per sequence
};

}  // namespace tessera
