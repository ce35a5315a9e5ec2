// Chat conversation fields shared by /v1/chat/completions and /tokenize:
// `messages`, `tools` and `chat_template_kwargs`, validated and normalized for
// the chat template. Pure functions; thread-safe; nothing throws.
#pragma once

#include <optional>

#include "server/openai/api_error.h"
#include "server/openai/request_common.h"

namespace tessera::openai {

// `messages`: a required non-empty array of objects with `role` in {system,
// developer, user, assistant, tool} and `content` a string, an array of text
// parts (joined with "\n"), or null/absent (assistant with `tool_calls`, or
// tool). Output: [{"role", "content", + name, tool_calls, tool_call_id,
// reasoning_content when given}]. Errors name e.g. "messages[2].role".
std::optional<ApiError> ParseMessages(const Json& body, Json* messages);
// The same for the value of `messages` (a front end that holds the list itself).
std::optional<ApiError> ParseMessageList(const Json& list, Json* messages);

// `tools`: null/absent -> null; else an array of {"type":"function",
// "function":{"name": string, ...}}, passed through as given.
std::optional<ApiError> ParseTools(const Json& body, Json* tools);

// `chat_template_kwargs`: null/absent -> {}; else must be an object.
std::optional<ApiError> ParseTemplateKwargs(const Json& body, Json* kwargs);

// add_generation_prompt (default true) and continue_final_message (default
// false); both true is a 400 naming continue_final_message.
std::optional<ApiError> ParseGenerationPromptFlags(const Json& body, bool* add_generation_prompt,
                                                   bool* continue_final_message);

}  // namespace tessera::openai
