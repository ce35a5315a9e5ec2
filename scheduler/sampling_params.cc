#include "scheduler/sampling_params.h"

#include <cmath>
#include <sstream>

namespace tessera {
namespace {

template <typename T>
Status Bad(const char* param, T value, const char* expect) {
  std::ostringstream os;
  os << "'" << param << "' is " << value << "; " << expect;
  return InvalidArgument(os.str());
}

bool InRange(double v, double lo, double hi) { return std::isfinite(v) && v >= lo && v <= hi; }

}  // namespace

Status SamplingParams::Validate(const ModelLimits& limits) const {
  if (max_tokens && *max_tokens < 1) return Bad("max_tokens", *max_tokens, "must be at least 1");
  if (min_tokens < 0) return Bad("min_tokens", min_tokens, "must be at least 0");
  if (max_tokens && min_tokens > *max_tokens) {
    return Bad("min_tokens", min_tokens, "must not exceed max_tokens");
  }
  if (!InRange(temperature, 0.0, 2.0)) return Bad("temperature", temperature, "must be in [0, 2]");
  if (!std::isfinite(top_p) || top_p <= 0.0f || top_p > 1.0f) {
    return Bad("top_p", top_p, "must be in (0, 1]");
  }
  if (top_k != -1 && top_k < 1) return Bad("top_k", top_k, "must be -1 (disabled) or at least 1");
  if (!InRange(min_p, 0.0, 1.0)) return Bad("min_p", min_p, "must be in [0, 1]");
  if (!InRange(presence_penalty, -2.0, 2.0)) {
    return Bad("presence_penalty", presence_penalty, "must be in [-2, 2]");
  }
  if (!InRange(frequency_penalty, -2.0, 2.0)) {
    return Bad("frequency_penalty", frequency_penalty, "must be in [-2, 2]");
  }
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f || repetition_penalty > 2.0f) {
    return Bad("repetition_penalty", repetition_penalty, "must be in (0, 2]");
  }
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0 || (limits.vocab_size > 0 && token >= limits.vocab_size)) {
      return Bad("logit_bias", token, "names a token id outside the vocabulary");
    }
    if (!InRange(bias, -100.0, 100.0)) {
      return Bad("logit_bias", bias, "values must be in [-100, 100]");
    }
  }
  for (const std::string& s : stop) {
    if (s.empty()) return InvalidArgument("'stop' must not contain an empty string");
  }
  for (int32_t t : stop_token_ids) {
    if (t < 0 || (limits.vocab_size > 0 && t >= limits.vocab_size)) {
      return Bad("stop_token_ids", t, "names a token id outside the vocabulary");
    }
  }
  if (n < 1 || n > limits.max_n) {
    return Bad("n", n, ("must be in [1, " + std::to_string(limits.max_n) + "]").c_str());
  }
  const std::string lp_range = "must be in [0, " + std::to_string(limits.max_logprobs) + "]";
  if (top_logprobs < 0 || top_logprobs > limits.max_logprobs) {
    return Bad("top_logprobs", top_logprobs, lp_range.c_str());
  }
  if (top_logprobs > 0 && !logprobs) {
    return InvalidArgument("'top_logprobs' requires 'logprobs' to be true");
  }
  if (prompt_logprobs && (*prompt_logprobs < 0 || *prompt_logprobs > limits.max_logprobs)) {
    return Bad("prompt_logprobs", *prompt_logprobs, lp_range.c_str());
  }
  return Status::Ok();
}

Status CheckContextLength(int64_t num_prompt_tokens, const SamplingParams& params,
                          const ModelLimits& limits) {
  const int64_t want = num_prompt_tokens + (params.max_tokens ? *params.max_tokens : 1);
  if (want > limits.max_model_len) {
    std::ostringstream os;
    os << "This model's maximum context length is " << limits.max_model_len << " tokens. However, you requested "
       << want << " tokens (" << num_prompt_tokens << " in the prompt, "
       << (params.max_tokens ? *params.max_tokens : 1) << " for the completion). Please reduce the prompt or "
       << "'max_tokens'.";
    return OutOfRange(os.str());
  }
  return Status::Ok();
}

int64_t ResolveMaxTokens(int64_t num_prompt_tokens, const SamplingParams& params,
                         const ModelLimits& limits) {
  const int64_t room = limits.max_model_len - num_prompt_tokens;
  return params.max_tokens ? std::min<int64_t>(*params.max_tokens, room) : room;
}

}  // namespace tessera
