#include "server/router/messages_proxy.h"
#include "common/log.h"

#include <atomic>
#include <vector>


#include "server/anthropic/errors.h"
#include "server/router/http_client.h"
#include "scheduler/block_hash.h"

namespace tessera {

namespace http = boost::beast::http;

std::optional<std::string> SaltedPayload(const ProxyContext& ctx, HttpExchange& ex, nlohmann::ordered_json body,
                                         bool salt, HttpResponse (*error_response)(const ApiError&)) {
  if (!body.is_object()) {
    ex.Send(error_response(BadRequest("the request body must be a JSON object")));
    return std::nullopt;
  }
  if (salt && ctx.flags.isolate_api_keys) {  // the key's namespace, carried to the instance as the salt
    if (auto it = body.find("cache_salt"); it != body.end() && !it->is_null() && !it->is_string()) {
      ex.Send(error_response(BadRequest("'cache_salt' must be a string", "cache_salt")));
      return std::nullopt;
    }
    body["cache_salt"] = TenantCacheSalt(ex.tenant(), CacheSaltOf(body));
  }
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

void RunMessagesProxy(const ProxyContext& ctx, const std::shared_ptr<HttpExchange>& ex, const std::string& path,
                      nlohmann::ordered_json body) {
  std::optional<std::string> payload =
      SaltedPayload(ctx, *ex, std::move(body), path == "/v1/messages", AnthropicErrorResponse);
  if (!payload) return;
  static const RelayApi kAnthropic{.error_response = AnthropicErrorResponse,
                                   .stream_error = anthropic::SseError,
                                   .stream_ends = {"event: message_stop"},
                                   .probe_on_404 = false,
                                   .owner_header = {},
                                   .relay_503_code = {}};
  RelayToInstance(ctx, ex, "POST", path, *payload, kAnthropic);
}

void RelayToInstance(const ProxyContext& ctx, const std::shared_ptr<HttpExchange>& ex, const std::string& method,
                     const std::string& target, const std::string& payload, const RelayApi& api) {
  const auto stopping = [&ctx] { return ctx.stopping != nullptr && ctx.stopping->load(std::memory_order_relaxed); };
  const auto gone = [&] { return ex->closed() || stopping(); };
  std::vector<std::string> failed;
  std::optional<HttpResponse> not_found;  // the last instance's 404 (probe_on_404)
  for (int attempt = 0, errors = 0; errors < 3 && attempt < 3 + 64 && !gone(); ++attempt) {
    std::optional<InstanceRef> inst = ctx.registry->Pick(InstanceRole::kDecode, failed);
    if (!inst) break;
    HttpCallResult r;
    HttpCallOptions o = ctx.registry->CallOptions();
    o.idle_timeout = std::chrono::milliseconds(120000);
    o.abandon = gone;
    if (!api.owner_header.empty() && !ex->tenant().empty()) {
      o.headers.emplace_back(std::string(api.owner_header), ex->tenant());
    }
    bool streaming = false;
    bool stopped = false;  // a terminal event relayed: the stream is complete
    std::string tail;      // the last bytes relayed, to find message_stop across pieces
    std::string held;      // a non-streamed answer, sent whole
    const int64_t estimate = static_cast<int64_t>(payload.size() / 4);
    ctx.registry->AddOutstanding(inst->address, estimate);
    Status s = HttpCall(inst->host, inst->port, method, target, payload, o, &r, [&](std::string_view d) {
      if (gone()) return false;
      if (!streaming && r.status == 200 && held.empty() && d.substr(0, 6) == "event:") {
        streaming = true;
        ex->StartStream(SseResponseHead());
      }
      if (streaming) {
        tail.append(d);
        for (const std::string& end : api.stream_ends) stopped = stopped || tail.find(end) != std::string::npos;
        if (tail.size() > 32) tail.erase(0, tail.size() - 32);
        ex->WriteChunk(std::string(d));
      } else {
        held.append(d);
      }
      return true;
    });
    ctx.registry->AddOutstanding(inst->address, -estimate);
    if (streaming) {
      // The instance failed, or the drain deadline cut the stream: tell the
      // client in the stream's own terms (an `error` event), never a silent end.
      if (!ex->closed() && !stopped && (stopping() || !s.ok())) {
        ex->WriteChunk(api.stream_error(
            {ApiStatus::kServiceUnavailable,
             stopping() ? "the router is shutting down" : "the instance serving this stream failed: " + s.message(),
             "server_error", "", "unavailable"}));
      }
      return ex->EndStream();
    }
    if (gone()) break;
    if (s.ok() && r.status == 503 && !api.relay_503_code.empty() &&
        held.find("\"" + std::string(api.relay_503_code) + "\"") != std::string::npos) {
      HttpResponse res{HttpStatus::service_unavailable, 11};
      res.set(http::field::content_type, "application/json");
      res.body() = std::move(held);
      res.prepare_payload();
      return ex->Send(std::move(res));
    }
    if (!s.ok() || r.status == 0 || r.status >= 500) {
      ctx.registry->MarkFailed(inst->address);
      failed.push_back(inst->address);
      ++errors;
      continue;
    }
    HttpResponse res{static_cast<HttpStatus>(r.status), 11};
    res.set(http::field::content_type, "application/json");
    res.body() = std::move(held);
    res.prepare_payload();
    if (api.probe_on_404 && r.status == 404) {  // the id lives on another instance, or nowhere
      failed.push_back(inst->address);
      not_found = std::move(res);
      continue;
    }
    return ex->Send(std::move(res));
  }
  if (not_found && !ex->closed()) return ex->Send(std::move(*not_found));
  if (ex->closed()) return;
  if (stopping()) {
    return ex->Send(api.error_response({ApiStatus::kServiceUnavailable, "the router is shutting down",
                                        "server_error", "", "shutting_down"}));
  }
  ex->Send(api.error_response({ApiStatus::kServiceUnavailable,
                                   failed.empty() ? "no decode instance is available"
                                                  : "no decode instance answered",
                                   "server_error", "", "unavailable"}));
}

}  // namespace tessera
