// vLLM's /tokenize and /detokenize: request parsing and response bodies.
// Pure; thread-safe; nothing throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai/api_error.h"
#include "server/openai/request_common.h"

namespace tessera::openai {

// Either a completion-style prompt or a chat conversation (`is_chat`).
struct TokenizeRequest {
  std::string model;
  bool is_chat = false;
  std::string prompt;  // !is_chat
  // is_chat: normalized messages (see ParseMessages), tools (null if none),
  // template kwargs (an object).
  Json messages;
  Json tools;
  Json template_kwargs;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  bool add_special_tokens = true;  // default true for prompts, false for chat
  bool return_token_strs = false;
};

struct DetokenizeRequest {
  std::string model;
  std::vector<int32_t> tokens;  // each inside the vocabulary
};

// {"prompt": string, ...} or {"messages": [...], ...}; exactly one of them.
std::optional<ApiError> ParseTokenizeRequest(std::string_view body, const RequestLimits& limits,
                                             TokenizeRequest* out);
std::optional<ApiError> ParseDetokenizeRequest(std::string_view body, const RequestLimits& limits,
                                               DetokenizeRequest* out);

// {"count", "max_model_len", "tokens", "token_strs" (only when given)}.
nlohmann::json TokenizeResponse(const std::vector<int32_t>& tokens, int64_t max_model_len,
                                const std::vector<std::string>* token_strs);
// {"prompt": text}.
nlohmann::json DetokenizeResponse(const std::string& text);

}  // namespace tessera::openai
