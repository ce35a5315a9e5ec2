#include "server/router/responses_proxy.h"

#include "server/openai/sse.h"
#include "server/router/messages_proxy.h"

namespace tessera {
namespace {

// The Responses API's error event (as an instance sends it mid-stream).
std::string ResponsesStreamError(const ApiError& e) {
  nlohmann::json event = {{"type", "error"},
                          {"code", e.code.empty() ? nlohmann::json(e.type) : nlohmann::json(e.code)},
                          {"message", e.message},
                          {"param", e.param.empty() ? nlohmann::json() : nlohmann::json(e.param)},
                          {"sequence_number", 0}};
  return "event: error\ndata: " + openai::DumpJson(event) + "\n\n";
}

const RelayApi& Api() {
  static const RelayApi api{.error_response = ErrorResponse,
                            .stream_error = ResponsesStreamError,
                            .stream_ends = {"event: response.completed", "event: response.incomplete",
                                            "event: response.failed", "event: error"},
                            .probe_on_404 = true};
  return api;
}

}  // namespace

void RunResponsesCreateProxy(const ProxyContext& ctx, const std::shared_ptr<HttpExchange>& ex,
                             nlohmann::ordered_json body) {
  std::optional<std::string> payload = SaltedPayload(ctx, *ex, std::move(body), true, ErrorResponse);
  if (payload) RelayToInstance(ctx, ex, "POST", "/v1/responses", *payload, Api());
}

void RunResponsesByIdProxy(const ProxyContext& ctx, const std::shared_ptr<HttpExchange>& ex) {
  const auto& target = ex->request().target();
  RelayToInstance(ctx, ex, std::string(ex->request().method_string()), std::string(target.data(), target.size()), "",
                  Api());
}

}  // namespace tessera
