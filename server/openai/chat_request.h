// POST /v1/chat/completions request parsing (OpenAI + vLLM extensions).
// Pure; thread-safe; nothing throws. Context length and the engine's own
// checks are not made here: the request path makes them after rendering and
// tokenizing, through the input processor (request_path.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "scheduler/sampling_params.h"
#include "server/openai/api_error.h"
#include "server/openai/request_common.h"
#include "server/openai/tool_calls/tool_choice.h"
#include "server/openai/structured_request.h"
#include "server/openai/kv_transfer_params.h"

namespace tessera::openai {

struct ChatRequest {
  StructuredOutputSpec structured;  // response_format / structured_outputs / guided_*
  std::string model;
  Json messages;         // normalized, see ParseMessages
  Json tools;            // null if none
  tools::ToolChoice tool_choice;  // kNone without tools; see ParseToolChoice
  bool parallel_tool_calls = true;
  Json template_kwargs;  // an object
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool add_special_tokens = false;
  bool echo = false;
  // max_completion_tokens (preferred) or max_tokens; unset: up to the context.
  // params.logprobs / top_logprobs mirror the two fields below.
  SamplingParams params;
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
  std::string cache_salt;  // "" : none (see StreamFlags)
  RetentionAsk retention;  // prompt_cache_retention (Anthropic: cache_control)
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool return_token_ids = false;   // vLLM: each choice also carries its new "token_ids"
  bool return_receipt = false;    // the receipt object in the body too (docs/architecture.md, "Receipts")
  KvTransferRequest kv_transfer;   // vLLM's kv_transfer_params (disaggregation), as on /v1/completions
};

// On failure returns the error to send (400; 404 model_not_found).
// tool_choice "required" / a named function are enforced by a grammar that
// PrepareChat builds (tool_grammar.h).
std::optional<ApiError> ParseChatRequest(std::string_view body, const RequestLimits& limits, ChatRequest* out);

// top_logprobs' range on chat (OpenAI's).
inline constexpr int64_t kMaxChatTopLogprobs = 20;
// Sets logprobs / top_logprobs (top_logprobs already range-checked): 400 when
// top_logprobs is given without logprobs. Shared with typed front ends (gRPC).
std::optional<ApiError> SetChatLogprobs(bool logprobs, std::optional<int64_t> top_logprobs, ChatRequest* r);

// What `echo` prepends to the generated content: the last message's content
// when echo is set, continue_final_message is true and that message is the
// assistant's; "" otherwise (echo is then ignored).
std::string ChatEchoPrefix(const ChatRequest& request);

}  // namespace tessera::openai
