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
#include <string>

#include <nlohmann/json.hpp>

#include "server/http/http_server.h"
#include "server/router/proxy_job.h"

namespace tessera {

// `path`: "/v1/messages" or "/v1/messages/count_tokens". `body`: already
// through the bounded parser.
void RunMessagesProxy(const ProxyContext& ctx, const std::shared_ptr<HttpExchange>& ex, const std::string& path,
                      nlohmann::ordered_json body);

}  // namespace tessera
