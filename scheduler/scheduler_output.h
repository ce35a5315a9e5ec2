// SchedulerOutput: one step's plan as plain data — which sequences run, which
// of their tokens, their block tables, the block copies to do first, and which
// sequences were preempted or ended (so the engine can drop per-sequence
// state). MakeForwardBatch (plan_to_batch.h) flattens it for the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/cache_waterfall.h"
#include "scheduler/kv_cache_manager.h"
#include "scheduler/request.h"

namespace tessera {

struct ScheduledSequence {
  SeqId seq_id = 0;
  std::string request_id;
  int32_t index = 0;  // choice index within the request
  // Position of token_ids[0]: the sequence's computed-token count before this step.
  int64_t start_position = 0;
  // Tokens computed this step: a prefill chunk, or the last sampled token plus
  // `num_draft_tokens` speculative drafts.
  std::vector<int32_t> token_ids;
  int32_t num_draft_tokens = 0;
  // Logits are wanted for the last `num_logits` tokens (0: mid-prompt chunk).
  // When `sample` is set the last 1 + num_draft_tokens of them are sampled
  // (target + verification); extra leading rows are for prompt_logprobs.
  int32_t num_logits = 0;
  bool sample = false;
  // Blocks covering positions [0, start_position + token_ids.size() + lookahead).
  std::vector<BlockId> block_ids;
};

struct SchedulerOutput {
  int64_t step = 0;
  std::vector<ScheduledSequence> seqs;  // in batch order
  std::vector<CopyOp> copies;           // perform before the forward pass
  std::vector<SeqId> preempted;         // blocks freed; will recompute later
  std::vector<SeqId> finished;          // ended since the previous plan (any reason)
  int64_t num_scheduled_tokens = 0;

  bool empty() const { return seqs.empty(); }
};

// What the executor hands back for one scheduled sequence with `sample` set:
// the accepted tokens — 1 normally, up to 1 + num_draft_tokens when
// speculating (accepted drafts then the bonus/correction token).
struct SampledTokens {
  SeqId seq_id = 0;
  std::vector<int32_t> token_ids;
};

// Per-sequence result of a step, for the front end's output streams.
struct SequenceOutput {
  SeqId seq_id = 0;
  std::string request_id;
  int32_t index = 0;
  std::vector<int32_t> new_token_ids;
  FinishReason finish_reason = FinishReason::kNone;  // kNone: still running
  int64_t num_cached_tokens = 0;  // prompt tokens found in the prefix cache on admission
  CacheWaterfall cache_waterfall;  // where those came from, why the rest were computed
};

}  // namespace tessera
