#include "server/openai/response_common.h"

#include <algorithm>
#include <cmath>

namespace tessera::openai {

nlohmann::json UsageJson(const UsageCounter& usage) {
  nlohmann::json u = {{"prompt_tokens", usage.prompt_tokens},
                      {"completion_tokens", usage.completion_tokens},
                      {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
  if (!usage.cache_waterfall.empty()) {
    u["prompt_tokens_details"] = CacheWaterfallJson(usage.cache_waterfall);
    u["prompt_tokens_details"]["cached_tokens"] = usage.cached_tokens;
  } else if (usage.cached_tokens > 0) {
    u["prompt_tokens_details"] = {{"cached_tokens", usage.cached_tokens}};
  }
  return u;
}

nlohmann::json CacheWaterfallJson(const CacheWaterfall& w) {
  nlohmann::json cached = nlohmann::json::object(), computed = nlohmann::json::object();
  for (size_t i = 0; i < kNumCacheSources; ++i) cached[CacheSourceName(static_cast<CacheSource>(i))] = w.cached[i];
  for (size_t i = 0; i < kNumComputeReasons; ++i) {
    computed[ComputeReasonName(static_cast<ComputeReason>(i))] = w.computed[i];
  }
  return {{"cached_tokens_details", std::move(cached)}, {"computed_tokens_details", std::move(computed)}};
}

nlohmann::json FinishReasonJson(FinishReason reason) {
  if (reason == FinishReason::kNone) return nullptr;
  return FinishReasonName(reason);
}

nlohmann::json StopReasonJson(const ChoiceDelta& delta) {
  if (delta.stop_string) return *delta.stop_string;
  if (delta.stop_token_id) return *delta.stop_token_id;
  return nullptr;
}

double ClampLogprob(float logprob) {
  const double v = logprob;
  return std::isnan(v) ? -9999.0 : std::max(v, -9999.0);
}

int64_t CodePoints(std::string_view text) {
  return std::count_if(text.begin(), text.end(),
                       [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

void UsageCounter::Update(const GenerationUpdate& u) {
  prompt_tokens = std::max(prompt_tokens, u.prompt_tokens);
  completion_tokens = std::max(completion_tokens, u.completion_tokens);
  cached_tokens = std::max(cached_tokens, u.cached_tokens);
  if (!u.cache_waterfall.empty()) cache_waterfall = u.cache_waterfall;
}

UsageCounter& UsageCounter::operator+=(const UsageCounter& other) {
  prompt_tokens += other.prompt_tokens;
  completion_tokens += other.completion_tokens;
  cached_tokens += other.cached_tokens;
  cache_waterfall += other.cache_waterfall;
  return *this;
}

}  // namespace tessera::openai
