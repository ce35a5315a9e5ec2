#include "server/openai/response_common.h"

#include <algorithm>
#include <cmath>

namespace tessera::openai {

nlohmann::json UsageJson(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
  nlohmann::json u = {{"prompt_tokens", prompt_tokens},
                      {"completion_tokens", completion_tokens},
                      {"total_tokens", prompt_tokens + completion_tokens}};
  if (cached_tokens > 0) u["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
  return u;
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
}

}  // namespace tessera::openai
