#include "server/router/responses_proxy.h"

#include "server/openai/sse.h"
#include "server/responses/shared_store_wire.h"
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

// `probe`: a 404 means "not on this instance" (per-instance stores, or a
// cancel, which only the instance generating the response can do); with a
// store every instance shares, the first instance's 404 is the answer.
const RelayApi& Api(bool probe) {
  static const auto make = [](bool p) {
    return RelayApi{.error_response = ErrorResponse,
                    .stream_error = ResponsesStreamError,
                    .stream_ends = {"event: response.completed", "event: response.incomplete",
                                    "event: response.failed", "event: error"},
                    .probe_on_404 = p,
                    .owner_header = responses::kOwnerHeader,
                    .relay_503_code = responses::kStoreUnavailableCode};
  };
  static const RelayApi probing = make(true), direct = make(false);
  return probe ? probing : direct;
}

bool SharedStore(const ProxyContext& ctx) {
  return ctx.registry->DecodeResponsesStoreIs(responses::kSharedStoreKind);
}

}  // namespace

void RunResponsesCreateProxy(const ProxyContext& ctx, const std::shared_ptr<HttpExchange>& ex,
                             nlohmann::ordered_json body) {
  std::optional<std::string> payload = SaltedPayload(ctx, *ex, std::move(body), true, ErrorResponse);
  if (payload) RelayToInstance(ctx, ex, "POST", "/v1/responses", *payload, Api(!SharedStore(ctx)));
}

void RunResponsesByIdProxy(const ProxyContext& ctx, const std::shared_ptr<HttpExchange>& ex) {
  const auto& target = ex->request().target();
  const bool cancel = ex->request().method() == boost::beast::http::verb::post;  // POST …/{id}/cancel
  RelayToInstance(ctx, ex, std::string(ex->request().method_string()), std::string(target.data(), target.size()), "",
                  Api(cancel || !SharedStore(ctx)));
}

}  // namespace tessera
