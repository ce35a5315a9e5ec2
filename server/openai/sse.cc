#include "server/openai/sse.h"

namespace tessera::openai {

std::string DumpJson(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string SseData(const nlohmann::json& event) { return "data: " + DumpJson(event) + "\n\n"; }

std::string SseDone() { return "data: [DONE]\n\n"; }

nlohmann::json ErrorJson(const ApiError& e) {
  nlohmann::json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return {{"error", err}};
}

std::string SseError(const ApiError& error) { return SseData(ErrorJson(error)); }

}  // namespace tessera::openai
