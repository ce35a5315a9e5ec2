// The router's Responses API front: POST /v1/responses and the by-id routes
// (GET/DELETE /v1/responses/{id}, GET …/input_items, POST …/cancel) relayed
// to the instances, which parse, generate and store. Stored responses live
// in each instance's memory (server/responses/README.md), so a by-id request
// or a create with previous_response_id is tried on every decode instance
// in turn until one does not answer 404 (cost: one call per instance that
// lacks it). Errors the router answers are OpenAI's shape; a cut stream ends
// with an `error` event. Blocking (a ProxyPool worker); thread-safe.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "server/http/http_server.h"
#include "server/router/proxy_job.h"

namespace tessera {

// POST /v1/responses. `body`: already through the bounded parser.
void RunResponsesCreateProxy(const ProxyContext& ctx, const std::shared_ptr<HttpExchange>& ex,
                             nlohmann::ordered_json body);
// The by-id routes: the request's method and target relayed as they are.
void RunResponsesByIdProxy(const ProxyContext& ctx, const std::shared_ptr<HttpExchange>& ex);

}  // namespace tessera
