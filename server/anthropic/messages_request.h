// POST /v1/messages and /v1/messages/count_tokens request parsing
// (Anthropic's Messages API). The body is validated field by field and
// translated into the chat request the OpenAI path already knows how to
// render, constrain and submit (openai::ChatRequest: messages in the OpenAI
// normal form of chat_messages.h, tools as functions, tool_choice, sampling),
// so both APIs share one request path (openai/request_path.h).
//
// Unlike the OpenAI endpoints (vLLM-like: unknown fields ignored), every
// field Anthropic's API does not define, or that this server cannot honour,
// is a 400 naming it (docs/architecture.md, "Validation").
// Pure; thread-safe; nothing throws. Cost linear in the body.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "server/openai/api_error.h"
#include "server/openai/chat_request.h"
#include "server/openai/request_common.h"

namespace tessera::anthropic {

using Json = openai::Json;

struct MessagesParseOptions {
  // `cache_control` markers become retention marks on chat.retention (serve
  // --cache-control retain, the default); false (--cache-control refuse): any
  // `cache_control` is a 400 naming it.
  bool accept_cache_control = true;
  // count_tokens: `max_tokens`, `stream`, sampling and `metadata` are not
  // part of the body (Anthropic's MessageCountTokensParams).
  bool count_tokens = false;
};

struct MessagesRequest {
  // model, messages (system first), tools, tool_choice, parallel_tool_calls,
  // template_kwargs (enable_thinking from `thinking`), params (max_tokens,
  // temperature, top_p, top_k, stop), stream, cache_salt; a final assistant
  // message (Anthropic's prefill) sets continue_final_message.
  openai::ChatRequest chat;
  // `thinking`: absent (the template's default), enabled or disabled.
  enum class Thinking { kDefault, kEnabled, kDisabled };
  Thinking thinking = Thinking::kDefault;
  int64_t thinking_budget_tokens = 0;  // kEnabled only
  std::string user_id;                 // metadata.user_id ("" : none); logged, no other effect
  // How many blocks carried cache_control (at most 4); their marks are in
  // chat.retention, each covering the chat messages up to and including the
  // one its block belongs to (0 messages: the tools alone).
  int cache_control_markers = 0;
};

// On failure the error to send: 400 naming the field ("messages[1].content[0].type"),
// 404 for a model other than the served one.
std::optional<ApiError> ParseMessagesRequest(std::string_view body, const openai::RequestLimits& limits,
                                             const MessagesParseOptions& options, MessagesRequest* out);

}  // namespace tessera::anthropic
