// Proposer: the interface every speculative proposer implements (n-gram
// lookup, draft model). Called by the engine loop after each step, once for
// all sequences the step computed, with the tokens they hold now; returns up
// to `k` draft tokens per sequence for the next step. Drafts are only
// proposals: the target model verifies them (acceptance.h), so a proposer can
// never change the output, only the speed.
// Not thread-safe: engine-loop thread only.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "engine/sampling.h"
#include "scheduler/kv_cache_manager.h"

namespace tessera {

struct DraftInput {
  SeqId seq_id = 0;
  std::span<const int32_t> token_ids;  // prompt + output; the last one has no KV yet when k > 0
  int64_t num_prompt_tokens = 0;
  // The target's step: it computed positions [start_position, ...); after
  // verification its KV is valid for [0, num_computed_tokens).
  int64_t start_position = 0;
  int64_t num_computed_tokens = 0;
  // Covers positions < token_ids.size() + k (the scheduler reserved them).
  std::span<const BlockId> block_ids;
  int32_t k = 0;  // drafts wanted; 0: none (a draft model still keeps its KV in step)
  // How drafts are drawn (draft model): greedy from the processed draft
  // distribution, or, with `want_probs`, sampled from it with its
  // probabilities returned for the acceptance rule.
  const SamplerConfig* sampler = nullptr;
  int32_t choice_index = 0;
  int64_t min_tokens = 0;
  std::span<const int32_t> banned_tokens;  // EOS / stop ids before min_tokens
  bool want_probs = false;
};

struct Draft {
  std::vector<int32_t> token_ids;
  // Per draft token, the proposal distribution it was drawn from (vocab
  // floats); empty: a point mass on the token (n-gram, greedy drafts).
  std::vector<std::vector<float>> probs;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // One Draft per input (empty where k == 0 or nothing to propose). On error
  // no drafts are used this step and the proposer must stay usable: the
  // engine falls back to plain decode for these sequences.
  virtual Status Propose(std::span<const DraftInput> inputs, std::vector<Draft>* drafts) = 0;
  // Block copies the target performs before a step (copy-on-write): a
  // proposer with its own KV cache mirrors them.
  virtual Status CopyBlocks(std::span<const CopyOp> copies) { (void)copies; return Status::Ok(); }
  // `seq` ended or was preempted: drop its state.
  virtual void Forget(SeqId seq) { (void)seq; }
};

}  // namespace tessera
