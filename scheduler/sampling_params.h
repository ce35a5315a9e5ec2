// SamplingParams: how one request's tokens are chosen and when it stops — the
// OpenAI completions/chat set plus the vLLM/llama-server extensions. Plain
// data; the front end fills it from JSON/gRPC, the scheduler reads the stop
// fields, the sampler reads the rest. Validate() gives messages that name the
// offending parameter so the server can return them verbatim.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/token_constraint.h"

namespace tessera {

// What the loaded model and server configuration allow.
struct ModelLimits {
  int64_t max_model_len = 4096;  // prompt + generated tokens
  int64_t vocab_size = 0;        // 0: token ids are not range-checked
  int32_t max_n = 16;            // choices per request
  int32_t max_logprobs = 20;     // logprobs / top_logprobs / prompt_logprobs (vLLM's --max-logprobs)
  // prompt_logprobs answers at most this many entries (prompt tokens x
  // (prompt_logprobs + 1)), so the answer's size is bounded; 0: no bound.
  int64_t max_prompt_logprobs_entries = 65536;
};

struct SamplingParams {
  // Generated-token limits. max_tokens unset: up to the context length.
  std::optional<int32_t> max_tokens;
  int32_t min_tokens = 0;  // EOS / stop_token_ids are ignored before this many

  // Distribution shaping. temperature 0 means greedy.
  float temperature = 1.0f;
  float top_p = 1.0f;   // (0, 1]
  int32_t top_k = -1;   // -1: disabled
  float min_p = 0.0f;   // [0, 1]; 0: disabled

  // Penalties (OpenAI presence/frequency, and multiplicative repetition).
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // (0, 2]; 1: disabled
  std::map<int32_t, float> logit_bias;  // token id -> bias in [-100, 100]

  // Per-request RNG seed: same seed -> same tokens whatever the batch.
  std::optional<uint64_t> seed;

  // Stop conditions. Stop *strings* are matched by the front end on detokenized
  // text (it then calls Scheduler::FinishSequence); token ids are checked here.
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;

  int32_t n = 1;  // independent choices sharing one prompt

  // Log-probabilities: of each sampled token (logprobs) plus the top_logprobs
  // alternatives; prompt_logprobs: that many per prompt token (0 = just the token).
  bool logprobs = false;
  int32_t top_logprobs = 0;
  std::optional<int32_t> prompt_logprobs;

  // Scheduling priority under the priority policy: lower runs first.
  int32_t priority = 0;

  // Structured output: which tokens may come next (null: unconstrained).
  // Shared by the request's choices; each gets its own matcher.
  std::shared_ptr<const TokenConstraint> constraint;
  // The request field it came from (e.g. "response_format"): named in the
  // error when the constraint fails mid-generation.
  std::string constraint_field;

  // Checks every range; INVALID_ARGUMENT naming the parameter on failure.
  Status Validate(const ModelLimits& limits) const;
};

// Context-length check for a prompt of `num_prompt_tokens`: fails with
// OUT_OF_RANGE (and only this check uses that code — see
// IsContextLengthExceeded) when prompt + max_tokens exceeds max_model_len, or
// when the prompt alone leaves no room for one generated token.
Status CheckContextLength(int64_t num_prompt_tokens, const SamplingParams& params,
                          const ModelLimits& limits);

// True for the status CheckContextLength returns on overflow; the server maps
// it to OpenAI's `context_length_exceeded` error code.
inline bool IsContextLengthExceeded(const Status& s) { return s.code() == StatusCode::kOutOfRange; }

// Generated tokens this request may produce: max_tokens, capped by the room
// left in the context. Assumes CheckContextLength passed.
int64_t ResolveMaxTokens(int64_t num_prompt_tokens, const SamplingParams& params,
                         const ModelLimits& limits);

}  // namespace tessera
