#include "server/openai/sse.h"

namespace tessera::openai {

std::string DumpJson(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string SseData(const nlohmann::json& event) { return "data: " + DumpJson(event) + "\n\n"; }

std::string SseDone() { return "data: [DONE]\n\n"; }

std::string SseError(const ApiError& error) { return SseData(ErrorJson(error)); }

}  // namespace tessera::openai
