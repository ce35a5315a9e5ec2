// The routes of `tessera serve`: /health, /ready, /metrics, /v1/models,
// /v1/models/{id}, /v1/completions, /v1/chat/completions, /tokenize, /detokenize,
// /server_info (what a router needs to know: role, KV block size, KV event and
// KV transfer endpoints).
//
// Cheap handlers run on the connection's strand (an io thread); the ones that
// parse a body, render templates or tokenize run on ServeContext::workers.
// Generation work is handed to the ServingEngine; its notifications hop back
// to the strand, where text is turned into JSON / SSE (never on the
// engine-loop thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "server/http/http_server.h"
#include "server/openai/tool_calls/chat_output.h"
#include "server/serving/metrics.h"
#include "server/serving/serving_engine.h"

namespace tessera {
namespace record {
class RequestLog;
}  // namespace record

namespace responses {
class ResponseStore;
}

enum class ModelState { kLoading, kReady, kFailed };

// Shared by all handlers; outlives the io_context's handlers.
struct ServeContext {
  HttpServer* server = nullptr;            // not owned
  ServingMetrics* metrics = nullptr;       // not owned
  boost::asio::io_context* ioc = nullptr;  // for request timers
  // Front-end workers: request parsing, validation, chat templates and
  // tokenization run here, never on the io threads that accept connections
  // and answer /health. Null: handlers run inline (tests).
  boost::asio::io_context* workers = nullptr;
  std::string served_model_name;           // known before the model loads
  std::chrono::seconds request_timeout{0};  // 0: none
  std::string role = "unified";             // --role, reported by /server_info
  // --internal-api-key-file's key (empty: none); the only credential that may
  // carry kv_transfer_params (docs/architecture.md, "Threat model").
  std::vector<std::string> internal_api_keys;
  // The KV event publisher's endpoints as bound ("" : no events), for /server_info.
  std::string kv_events_endpoint, kv_events_replay_endpoint, kv_events_topic;
  // Prometheus text appended to /metrics (e.g. the KV event publisher's); may be empty.
  std::function<std::string()> extra_metrics;
  // Reasoning / tool-call output parsing of chat completions; written with
  // the engine, before state turns kReady (read only by ready handlers).
  openai::tools::ChatOutputConfig chat_output;
  // serve --cache-control retain (the default): Anthropic cache_control
  // markers retain their prefixes (docs/architecture.md, "Retention");
  // false (refuse): a 400 naming the field (server/anthropic/README.md).
  bool cache_control_retain = true;
  // /v1/responses' stored responses (server/responses/response_store.h); not
  // owned; null: the Responses API is not registered.
  responses::ResponseStore* response_store = nullptr;
  // serve --record (server/record/request_log.h): every finished generation
  // is appended; not owned; null: nothing is recorded.
  record::RequestLog* request_log = nullptr;
  // Set once by the loader thread (release) before state turns kReady; the
  // engine outlives the io threads.
  std::atomic<ServingEngine*> engine{nullptr};
  std::atomic<ModelState> state{ModelState::kLoading};
  std::atomic<bool> draining{false};
  // Prefill/decode roles: the gRPC API's port (-1: off or another role), on
  // /ready ("grpc_port") so a router's gRPC front finds it.
  std::atomic<int> grpc_port{-1};

  ServingEngine* ready_engine() const {
    return state.load(std::memory_order_acquire) == ModelState::kReady ? engine.load(std::memory_order_acquire)
                                                                        : nullptr;
  }
};

void RegisterOpenAiRoutes(ServeContext* ctx);

// /v1/completions and /v1/chat/completions (generation_routes.cc).
void HandleCompletions(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex);
void HandleChatCompletions(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex);

// The error (with Retry-After where it applies) as a response.
HttpResponse ErrorResponseWithRetry(const ApiError& error);
// 503 while loading or failed.
ApiError NotReadyError(const ServeContext& ctx);

// Runs `fn` on the front-end workers (inline when there are none). A handler
// that throws answers 500 (in `error_response`'s shape) instead of taking a
// worker down.
void OffIo(ServeContext* ctx, std::shared_ptr<HttpExchange> ex,
           void (*fn)(ServeContext*, const std::shared_ptr<HttpExchange>&),
           HttpResponse (*error_response)(const ApiError&) = ErrorResponse);

}  // namespace tessera
