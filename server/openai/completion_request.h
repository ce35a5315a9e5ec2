// POST /v1/completions request parsing (OpenAI + vLLM extensions).
// Pure; thread-safe; nothing throws. Context length and the engine's own
// checks are not made here: the request path makes them after tokenizing,
// through the input processor (request_path.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "scheduler/sampling_params.h"
#include "server/openai/api_error.h"
#include "server/openai/request_common.h"
#include "server/openai/kv_transfer_params.h"
#include "server/openai/structured_request.h"

namespace tessera::openai {

inline constexpr int32_t kDefaultCompletionMaxTokens = 16;

// One prompt: text to tokenize, or token ids (exactly one kind is set).
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> token_ids;
};

struct CompletionRequest {
  StructuredOutputSpec structured;  // response_format / structured_outputs / guided_*
  std::string model;
  std::vector<PromptInput> prompts;  // 1..kMaxPrompts, none empty
  // max_tokens defaults to 16; an explicit null means "up to the context".
  // logprobs=k sets params.logprobs and params.top_logprobs=k; with echo,
  // params.prompt_logprobs is raised to k so the prompt tokens get logprobs.
  SamplingParams params;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;
  bool echo = false;
  bool add_special_tokens = true;
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
  std::string cache_salt;                  // "" : none (see StreamFlags)
  RetentionAsk retention;  // prompt_cache_retention (Anthropic: cache_control)
  std::optional<int32_t> logprobs;         // completions style: alternatives per token
  std::optional<int32_t> prompt_logprobs;  // as asked (vLLM); reported per choice
  bool return_token_ids = false;           // vLLM: each choice also carries its new "token_ids"
  bool return_receipt = false;    // the receipt object in the body too (docs/architecture.md, "Receipts")
  KvTransferRequest kv_transfer;           // vLLM's kv_transfer_params (disaggregation)
};

// On failure returns the error to send (400; 404 model_not_found). `prompt`
// is a string, an array of strings, an array of token ids or an array of
// arrays of token ids; empty strings and empty id lists are refused.
std::optional<ApiError> ParseCompletionRequest(std::string_view body, const RequestLimits& limits,
                                               CompletionRequest* out);

// The prompt's refusals, shared with typed front ends (gRPC): `prompt` of the
// wrong shape, an empty text prompt, a token id outside the vocabulary.
ApiError PromptTypeError(const Json& shown);
ApiError EmptyPromptError();
ApiError PromptTokenIdError(int64_t vocab_size, const Json& shown);

}  // namespace tessera::openai
