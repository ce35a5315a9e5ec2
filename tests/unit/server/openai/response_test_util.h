// Builders of ServingEngine updates for the response tests.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "server/serving/serving_engine.h"

namespace tessera::openai::testing {

inline LogprobEntry E(int32_t id, std::string token, float logprob, std::vector<LogprobEntry> top = {}) {
  LogprobEntry e;
  e.token_id = id;
  e.bytes.assign(token.begin(), token.end());
  e.token = std::move(token);
  e.logprob = logprob;
  e.top = std::move(top);
  return e;
}

inline ChoiceDelta D(int32_t index, std::string text, std::vector<LogprobEntry> logprobs = {},
                     FinishReason finish = FinishReason::kNone) {
  ChoiceDelta d;
  d.index = index;
  d.text = std::move(text);
  for (const LogprobEntry& e : logprobs) d.token_ids.push_back(e.token_id);
  d.logprobs = std::move(logprobs);
  d.finish_reason = finish;
  return d;
}

inline GenerationUpdate U(std::vector<ChoiceDelta> choices, int64_t prompt_tokens, int64_t completion_tokens,
                          bool finished = false) {
  GenerationUpdate u;
  u.choices = std::move(choices);
  u.prompt_tokens = prompt_tokens;
  u.completion_tokens = completion_tokens;
  u.finished = finished;
  return u;
}

}  // namespace tessera::openai::testing
