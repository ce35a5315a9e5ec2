// Request: what a client asked for, as the engine sees it — token ids (the
// front end has already applied the chat template and tokenized), sampling
// parameters and cache keys. Immutable once submitted; the scheduler keeps
// its per-choice progress in Sequence (sequence.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/sampling_params.h"

namespace tessera {

// Why a sequence ended. kStop: EOS, a stop token, or a stop string (reported
// by the front end); kLength: max_tokens or the context length; kAbort: the
// client went away or the request was cancelled.
enum class FinishReason { kNone, kStop, kLength, kAbort };

// OpenAI's spelling: "stop", "length", "abort" ("" for kNone).
const char* FinishReasonName(FinishReason reason);

struct Request {
  std::string id;  // unique among live requests; chosen by the front end
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
  // Mixed into every prefix-cache block hash, so requests only share KV when
  // these match: LoRA adapter id, a per-tenant cache salt, multimodal ids.
  std::vector<uint64_t> cache_keys;
  // vLLM's cache_salt (a tenant's secret): mixed into the first block's hash
  // only (CacheSaltRoot), so the chain carries it; "" : unsalted.
  std::string cache_salt;
  // Monotonic nanoseconds when the front end received it (queue-time metric);
  // 0: the scheduler stamps it at AddRequest.
  int64_t arrival_time_ns = 0;
};

// Parameters, prompt token ids (non-empty, inside the vocabulary) and context
// length. INVALID_ARGUMENT naming the field, or OUT_OF_RANGE for context length.
Status ValidateRequest(const Request& request, const ModelLimits& limits);

}  // namespace tessera
