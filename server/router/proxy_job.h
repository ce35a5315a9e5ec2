// ProxyJob: one client request through the router — tokenize, prefill (or
// not), decode with stream relay, decode migration on failure — answering the
// client in its own API's format (completions or chat, streamed or not).
// Runs on a ProxyPool worker (blocking calls to instances); writes to the
// client through HttpExchange, which is thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/http/http_server.h"
#include "server/router/instance_registry.h"
#include "server/router/router.h"
#include "server/router/router_metrics.h"

namespace tessera {

class KvRouter;

struct ProxyContext {
  InstanceRegistry* registry = nullptr;
  RouterMetrics* metrics = nullptr;
  RouterFlags flags;
  KvRouter* kv_router = nullptr;  // --routing-logic (always set by the router)
  // Set (once, never cleared) when the router's drain deadline passes: every
  // job drops its upstream call within ~250 ms (the instance aborts the
  // request and frees its blocks) and ends its client's answer as an instance
  // does at its own deadline (docs/architecture.md, "Router"). Null: never.
  const std::atomic<bool>* stopping = nullptr;
};

// Blocks until the client is answered (or gone). `body`: the request body,
// already parsed by the bounded parser on a front-end worker.
void RunProxyJob(const ProxyContext& ctx, const std::shared_ptr<HttpExchange>& ex, bool chat,
                 nlohmann::ordered_json body);

// Steps shared with the router's gRPC front (router_grpc.h), over OpenAI
// request bodies (`chat`: a /v1/chat/completions body). Blocking; thread-safe.

// The /tokenize body of a request body (its prompt or messages and what
// renders them).
nlohmann::ordered_json TokenizeRequestBody(const nlohmann::ordered_json& body, bool chat);
// The prompt's token ids from an instance's /tokenize, appended to *ids.
// false: *error_status and *error_body say why (an instance's own 4xx answer
// as it came, or 503 and a message when no instance could tokenize).
bool TokenizeUpstream(const ProxyContext& ctx, const nlohmann::ordered_json& tokenize_body, std::vector<int32_t>* ids,
                      int* error_status, std::string* error_body);
// The prompt's KV on the least loaded prefill instance (another one on
// failure): vLLM's kv_transfer_params for the decode, or null when skipped
// (empty or short prompt, prompt logprobs asked) or failed; counted in the
// router's metrics. `request_id` is for logs.
// The request's cache_salt ("" : none or not a string).
std::string CacheSaltOf(const nlohmann::ordered_json& body);

nlohmann::ordered_json PrefillUpstream(const ProxyContext& ctx, const nlohmann::ordered_json& body, bool chat,
                                       const std::vector<int32_t>& prompt, const std::string& request_id);

}  // namespace tessera
