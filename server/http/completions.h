// /v1/completions request validation and response shaping (OpenAI format).
// Pure functions of their inputs; thread-safe.
//
// At this stage prompts are token ids only (the tokenizer comes later), decoding
// is greedy and non-streaming; see ParseCompletionRequest for what is refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/http/responses.h"

namespace tessera {

// What the served model allows; from EngineInfo once the model is loaded.
struct CompletionLimits {
  std::string served_model;
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  int64_t num_kv_blocks = 0;
  int64_t block_size = 16;
};

struct CompletionRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;
};

inline constexpr int64_t kDefaultMaxTokens = 16;

// Parses and validates a request body. On failure returns the error to send
// (400, or 404 model_not_found); unknown fields are ignored. `prompt` must be a
// list of token ids or a list holding one such list. Without max_tokens the
// default is kDefaultMaxTokens, shortened to fit the max model length.
std::optional<ApiError> ParseCompletionRequest(const std::string& body, const CompletionLimits& limits,
                                               CompletionRequest* out);

// The OpenAI text_completion object for one choice.
nlohmann::json MakeCompletionResponse(const std::string& id, int64_t created, const std::string& model,
                                      const std::string& text, const std::vector<int32_t>& tokens,
                                      const std::string& finish_reason, int64_t prompt_tokens);

}  // namespace tessera
