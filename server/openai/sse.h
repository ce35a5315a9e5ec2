// Server-sent-event framing for streamed OpenAI responses. Pure; thread-safe;
// never throws (invalid UTF-8 is replaced).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "server/openai/api_error.h"

namespace tessera::openai {

// "data: <compact json>\n\n".
std::string SseData(const nlohmann::json& event);
// "data: [DONE]\n\n".
std::string SseDone();
// The error object as a data event, as vLLM sends it mid-stream:
// "data: {\"error\":{\"message\",\"type\",\"param\",\"code\"}}\n\n".
std::string SseError(const ApiError& error);
// Compact JSON text; invalid UTF-8 replaced.
std::string DumpJson(const nlohmann::json& j);

}  // namespace tessera::openai
