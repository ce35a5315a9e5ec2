// POST /v1/responses request parsing (OpenAI's Responses API). The body is
// validated field by field and translated into the chat request the OpenAI
// path already renders, constrains and submits (openai::ChatRequest), so
// /v1/chat/completions, /v1/messages and /v1/responses share one request path
// (openai/request_path.h).
//
// Fields follow the chat route's policy (openai/request_common.h): a field
// the API does not define is ignored, as vLLM does; every field it defines
// that this server cannot honour (built-in tools, background, include,
// conversation, prompt templates, truncation "auto", ...) is a 400 naming it.
// Pure; thread-safe; nothing throws. Cost linear in the body.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "server/openai/api_error.h"
#include "server/openai/chat_request.h"
#include "server/openai/request_common.h"

namespace tessera::responses {

using Json = openai::Json;

struct ResponsesRequest {
  // model, tools (as chat functions), tool_choice, parallel_tool_calls,
  // template_kwargs (reasoning_effort), params (max_output_tokens,
  // temperature, top_p), structured (text.format), stream, cache_salt.
  // chat.messages is empty until BuildChatMessages.
  openai::ChatRequest chat;
  // `input` as items in their stored form, each with an id ("msg_…",
  // "fc_…", "fco_…", "rs_…" when the client gave none): a string input is
  // one user message item.
  Json input_items = Json::array();
  std::optional<std::string> instructions;  // a system message before the conversation; not inherited
  std::string previous_response_id;         // "" : none
  bool store = true;
  std::string user;  // `user` / `safety_identifier`: logged, no other effect (as on chat)
  // The request's settings as the Response object echoes them: tools (the
  // Responses form), tool_choice, text, reasoning, temperature, top_p,
  // max_output_tokens, parallel_tool_calls, metadata, instructions, store,
  // previous_response_id, user, truncation.
  Json echo = Json::object();
};

// On failure the error to send: 400 naming the field ("input[2].content[0].type",
// "tools[0].type"), 404 for a model other than the served one.
std::optional<ApiError> ParseResponsesRequest(std::string_view body, const openai::RequestLimits& limits,
                                              ResponsesRequest* out);

// Items (stored form) -> chat messages in the OpenAI normal form: user,
// system and developer messages as they are; a run of reasoning, assistant
// message and function_call items becomes one assistant message
// (reasoning_content, content, tool_calls); function_call_output a tool
// message. Errors name `at`[i].
std::optional<ApiError> ItemsToMessages(const Json& items, const std::string& at, Json* messages);

// chat.messages from `instructions`, the conversation a previous response
// left (its input and output items, in order; an empty array when none) and
// this request's input items.
std::optional<ApiError> BuildChatMessages(const Json& prior_items, ResponsesRequest* request);

}  // namespace tessera::responses
