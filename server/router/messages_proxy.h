// The router's Anthropic Messages API front: POST /v1/messages and
// /v1/messages/count_tokens relayed to one decode (or unified) instance,
// which parses, renders and generates; the router adds the client key's
// cache namespace (--cache-isolation api-key) and relays the answer as it
// arrives (SSE events byte for byte). Instance choice is by load
// (InstanceRegistry::Pick), retried on another instance while nothing has
// reached the client; no prefill/decode split and no KV-aware choice yet
// (those need the prompt's tokens, which only the OpenAI fronts compute
// here). Errors the router itself answers are in Anthropic's shape; a stream
// cut by the instance failing or by the drain deadline ends with an `error`
// event (never a silent end; a client that left gets nothing more).
// Blocking (a ProxyPool worker); thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/http/http_server.h"
#include "server/router/proxy_job.h"

namespace tessera {

// `path`: "/v1/messages" or "/v1/messages/count_tokens". `body`: already
// through the bounded parser.
void RunMessagesProxy(const ProxyContext& ctx, const std::shared_ptr<HttpExchange>& ex, const std::string& path,
                      nlohmann::ordered_json body);

// How one API's requests are relayed to one instance (the Messages API
// above, the Responses API in responses_proxy.h).
struct RelayApi {
  HttpResponse (*error_response)(const ApiError&) = nullptr;  // the router's own errors
  std::string (*stream_error)(const ApiError&) = nullptr;     // the event a cut stream ends with
  std::vector<std::string> stream_ends;  // "event: …" lines that complete a stream
  // A 404 is the instance's own answer (an id it does not hold): the others
  // are tried in turn, and the last 404 is relayed when none holds it.
  bool probe_on_404 = false;
  // Sent with the router's bearer when the client authenticated (its tenant,
  // ApiKeyTenantId): the header an instance keys what it stores by ("" : none).
  std::string_view owner_header;
  // A 503 whose body names this error code is the instance's own answer (a
  // store they share is down): relayed, the instance kept in rotation.
  std::string_view relay_503_code;
};

// `body` as sent on: the client key's namespace put in its cache_salt when
// `salt` and --cache-isolation api-key. nullopt: refused (answered with
// `error_response`).
std::optional<std::string> SaltedPayload(const ProxyContext& ctx, HttpExchange& ex, nlohmann::ordered_json body,
                                         bool salt, HttpResponse (*error_response)(const ApiError&));

// Relays `method target` (the query string included) with `payload` to a
// decode instance picked by load, retried on another while nothing reached
// the client (at most 3 failures); SSE answers relayed as they arrive.
void RelayToInstance(const ProxyContext& ctx, const std::shared_ptr<HttpExchange>& ex, const std::string& method,
                     const std::string& target, const std::string& payload, const RelayApi& api);

}  // namespace tessera
