// ProxyJob: one client request through the router — tokenize, prefill (or
// not), decode with stream relay, decode migration on failure — answering the
// client in its own API's format (completions or chat, streamed or not).
// Runs on its own thread (blocking calls to instances); writes to the client
// through HttpExchange, which is thread-safe.
#pragma once

#include <memory>

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
  KvRouter* kv_router = nullptr;  // --routing-logic; null: least loaded
};

// Blocks until the client is answered (or gone).
void RunProxyJob(const ProxyContext& ctx, const std::shared_ptr<HttpExchange>& ex, bool chat);

}  // namespace tessera
