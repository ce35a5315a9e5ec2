#include "scheduler/request.h"

namespace tessera {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "";
}

Status ValidateRequest(const Request& request, const ModelLimits& limits) {
  if (request.prompt_token_ids.empty()) return InvalidArgument("'prompt' must contain at least one token");
  for (size_t i = 0; i < request.prompt_token_ids.size(); ++i) {
    const int32_t t = request.prompt_token_ids[i];
    if (t < 0 || (limits.vocab_size > 0 && t >= limits.vocab_size)) {
      return InvalidArgument("'prompt' token " + std::to_string(i) + " is id " + std::to_string(t) +
                             ", outside the vocabulary [0, " + std::to_string(limits.vocab_size) + ")");
    }
  }
  RETURN_IF_ERROR(request.params.Validate(limits));
  if (request.params.prompt_logprobs && limits.max_prompt_logprobs_entries > 0) {
    const int64_t entries =
        static_cast<int64_t>(request.prompt_token_ids.size()) * (int64_t{*request.params.prompt_logprobs} + 1);
    if (entries > limits.max_prompt_logprobs_entries) {
      return InvalidArgument("'prompt_logprobs' " + std::to_string(*request.params.prompt_logprobs) + " on " +
                             std::to_string(request.prompt_token_ids.size()) + " prompt tokens asks for " +
                             std::to_string(entries) + " entries; this server answers at most " +
                             std::to_string(limits.max_prompt_logprobs_entries) +
                             " (--max-prompt-logprobs-entries): ask for fewer alternatives or a shorter prompt");
    }
  }
  if (request.export_kv && request.params.n != 1) {
    return InvalidArgument("'n' must be 1 when the prompt's KV is exported to a decode instance "
                           "(kv_transfer_params.do_remote_decode)");
  }
  return CheckContextLength(static_cast<int64_t>(request.prompt_token_ids.size()), request.params, limits);
}

Status CheckRequestInvariants(const Request& request, const ModelLimits& limits) {
  const char* broken = nullptr;
  if (request.id.empty()) {
    broken = "an empty id";
  } else if (request.prompt_token_ids.empty()) {
    broken = "an empty prompt";
  } else if (request.params.n < 1 || (request.export_kv && request.params.n != 1)) {
    broken = "a choice count it cannot serve";
  } else if (!CheckContextLength(static_cast<int64_t>(request.prompt_token_ids.size()), request.params, limits).ok()) {
    broken = "prompt + max_tokens over the context length";
  }
  if (broken == nullptr) return Status::Ok();
  return Internal("request '" + request.id + "' reached the engine unvalidated: " + broken);
}

}  // namespace tessera
