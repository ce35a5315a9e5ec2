// Small pieces shared by the completions and chat response builders. Pure;
// thread-safe.
#pragma once

#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "scheduler/request.h"
#include "server/serving/serving_engine.h"

namespace tessera::openai {

struct UsageCounter;

// {"prompt_tokens","completion_tokens","total_tokens"} plus
// "prompt_tokens_details":{"cached_tokens"} when cached_tokens > 0, and with
// the cache waterfall once known: "prompt_tokens_details" then always, with
// CacheWaterfallJson's two objects beside "cached_tokens".
nlohmann::json UsageJson(const UsageCounter& usage);

// The cache waterfall (docs/architecture.md, "Cache waterfall"), every name
// present: {"cached_tokens_details":{"pool","host","disk","redis","peer"},
// "computed_tokens_details":{"no_prefix","evicted","not_written",
// "routed_elsewhere","tail"}}. The first sums to cached_tokens; both together
// to the prompt's tokens.
nlohmann::json CacheWaterfallJson(const CacheWaterfall& waterfall);

// "stop" | "length" | "abort", or null while unfinished.
nlohmann::json FinishReasonJson(FinishReason reason);

// vLLM's stop_reason: the matched stop string, the stop token id, or null.
nlohmann::json StopReasonJson(const ChoiceDelta& delta);

// Logprobs as reported: -inf / NaN / tiny values become -9999 (vLLM).
double ClampLogprob(float logprob);

// Unicode code points in UTF-8 text (vLLM's text_offset counts Python chars).
int64_t CodePoints(std::string_view text);

// Latest usage of one generation (updates carry running totals).
struct UsageCounter {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  CacheWaterfall cache_waterfall;  // empty until the engine reported it
  void Update(const GenerationUpdate& u);
  UsageCounter& operator+=(const UsageCounter& other);  // several prompts' usage together
};

}  // namespace tessera::openai
