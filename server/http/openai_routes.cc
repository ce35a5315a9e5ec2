#include "server/http/openai_routes.h"
#include "common/log.h"
#include "server/http/receipt_routes.h"

#include <boost/asio/post.hpp>

#include "engine/kv_transfer/kv_transport.h"
#include "server/openai/request_common.h"
#include "server/openai/request_path.h"
#include "server/openai/sse.h"
#include "server/openai/tokenize_request.h"
#include "server/responses/response_store.h"

namespace tessera {
namespace {

namespace http = boost::beast::http;
using json = nlohmann::json;

void HandleReady(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex) {
  if (ctx->draining.load()) return ex->Send(JsonResponse(HttpStatus::service_unavailable, {{"status", "draining"}}));
  if (ServingEngine* engine = ctx->ready_engine()) {
    if (Status g = engine->group_error(); !g.ok()) {
      return ex->Send(JsonResponse(HttpStatus::service_unavailable, {{"status", "failed"}, {"error", g.message()}}));
    }
  }
  switch (ctx->state.load()) {
    case ModelState::kReady: {
      nlohmann::json body = {{"status", "ready"}};
      if (const int g = ctx->grpc_port.load(); g >= 0) body["grpc_port"] = g;
      return ex->Send(JsonResponse(HttpStatus::ok, body));
    }
    case ModelState::kLoading:
      return ex->Send(JsonResponse(HttpStatus::service_unavailable, {{"status", "loading"}}));
    case ModelState::kFailed:
      return ex->Send(JsonResponse(HttpStatus::service_unavailable, {{"status", "failed"}}));
  }
}

void HandleMetrics(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex) {
  if (ServingEngine* engine = ctx->ready_engine()) {
    ctx->metrics->UpdateFromScheduler(engine->scheduler_metrics());
    ctx->metrics->UpdateExpertLoad(engine->expert_load());
    if (std::optional<double> a = engine->predicted_slo_attainment()) ctx->metrics->SetPredictedSloAttainment(*a);
    if (const KvTierManager* tiers = engine->kv_tiers()) ctx->metrics->UpdateKvTiers(tiers->stats(), tiers->totals());
    if (auto times = engine->rank_times(); !times.empty()) {
      std::vector<double> step, coll;
      for (const auto& t : times) step.push_back(t.step_seconds), coll.push_back(t.collective_seconds);
      ctx->metrics->UpdateRankTimes(step, coll);
    }
  }
  HttpResponse res{HttpStatus::ok, 11};
  res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
  res.body() = ctx->metrics->Serialize();
  if (ctx->extra_metrics) res.body() += ctx->extra_metrics();
  ex->Send(std::move(res));
}

void HandleModels(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex) {
  ServingEngine* engine = ctx->ready_engine();
  if (engine == nullptr) return ex->Send(ErrorResponseWithRetry(NotReadyError(*ctx)));
  const json model = {{"id", engine->served_model_name()},
                      {"object", "model"},
                      {"created", engine->created_unix()},
                      {"owned_by", "tessera"},
                      {"root", engine->served_model_name()},
                      {"max_model_len", engine->limits().max_model_len}};
  ex->Send(JsonResponse(HttpStatus::ok, {{"object", "list"}, {"data", json::array({model})}}));
}

// GET /server_info: what a router learns about an instance without per-instance
// flags. Answers while loading too (block_size, num_kv_blocks and kv_transfer
// then absent or null).
void HandleServerInfo(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex) {
  json info = {{"role", ctx->role}, {"model", ctx->served_model_name}, {"block_size", nullptr},
               {"kv_events", nullptr}, {"kv_transfer", nullptr}};
  // Where finished /v1/responses live: "memory" (this instance) or "redis"
  // (shared: the router then sends by-id requests to any instance).
  if (ctx->response_store != nullptr) info["responses_store"] = ctx->response_store->kind();
  if (!ctx->kv_events_endpoint.empty()) {
    info["kv_events"] = {{"endpoint", ctx->kv_events_endpoint},
                         {"replay_endpoint", ctx->kv_events_replay_endpoint},
                         {"topic", ctx->kv_events_topic}};
  }
  if (ServingEngine* engine = ctx->ready_engine()) {
    info["block_size"] = engine->kv_block_size();
    info["num_kv_blocks"] = engine->kv_num_blocks();
    // How this instance names blocks: a KV-aware router hashes prompts the same way.
    info["prefix_caching_hash_algo"] = PrefixHashAlgoName(engine->kv_hash_algo());
    if (const KvTransport* kt = engine->kv_transport()) {
      info["kv_transfer"] = {{"host", kt->host()}, {"port", kt->port()}, {"engine_id", kt->engine_id()}};
    }
  }
  ex->Send(JsonResponse(HttpStatus::ok, info));
}

openai::RequestLimits LimitsOf(const ServingEngine& engine) {
  return {engine.served_model_name(), engine.limits()};
}

void HandleTokenize(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex) {
  ServingEngine* engine = ctx->ready_engine();
  if (engine == nullptr) return ex->Send(ErrorResponseWithRetry(NotReadyError(*ctx)));
  openai::TokenizeRequest req;
  std::vector<int32_t> ids;
  if (auto err = openai::PrepareTokenize(openai::RequestModelOf(*engine), ex->request().body(), &req, &ids)) {
    return ex->Send(ErrorResponse(*err));
  }
  std::vector<std::string> strs;
  if (req.return_token_strs) {
    for (int32_t id : ids) {
      const std::string* s = engine->tokenizer().IdToToken(id);
      strs.push_back(s ? *s : std::string());
    }
  }
  ex->Send(JsonResponse(HttpStatus::ok, openai::TokenizeResponse(ids, engine->limits().max_model_len,
                                                                 req.return_token_strs ? &strs : nullptr)));
}

void HandleDetokenize(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex) {
  ServingEngine* engine = ctx->ready_engine();
  if (engine == nullptr) return ex->Send(ErrorResponseWithRetry(NotReadyError(*ctx)));
  openai::DetokenizeRequest req;
  if (auto err = openai::ParseDetokenizeRequest(ex->request().body(), LimitsOf(*engine), &req)) {
    return ex->Send(ErrorResponse(*err));
  }
  StatusOr<std::string> text = engine->tokenizer().Decode(req.tokens);
  if (!text.ok()) return ex->Send(ErrorResponse(BadRequest(text.status().message(), "tokens")));
  ex->Send(JsonResponse(HttpStatus::ok, openai::DetokenizeResponse(*text)));
}

// GET /v1/models/{id}: the served model, or OpenAI's 404 model_not_found.
void HandleModel(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex, const std::string& id) {
  ServingEngine* engine = ctx->ready_engine();
  if (engine == nullptr) return ex->Send(ErrorResponseWithRetry(NotReadyError(*ctx)));
  if (id != engine->served_model_name()) {
    ApiError e = BadRequest("The model `" + id.substr(0, 256) + "` does not exist.", "model", "model_not_found");
    e.status = ApiStatus::kNotFound;
    return ex->Send(ErrorResponse(e));
  }
  ex->Send(JsonResponse(HttpStatus::ok, {{"id", engine->served_model_name()},
                                         {"object", "model"},
                                         {"created", engine->created_unix()},
                                         {"owned_by", "tessera"},
                                         {"root", engine->served_model_name()},
                                         {"max_model_len", engine->limits().max_model_len}}));
}

}  // namespace

HttpResponse ErrorResponseWithRetry(const ApiError& error) {
  HttpResponse res = ErrorResponse(error);
  if (const int64_t retry = RetryAfterSeconds(error); retry > 0) res.set(http::field::retry_after, std::to_string(retry));
  return res;
}

void OffIo(ServeContext* ctx, std::shared_ptr<HttpExchange> ex,
           void (*fn)(ServeContext*, const std::shared_ptr<HttpExchange>&),
           HttpResponse (*error_response)(const ApiError&)) {
  auto run = [ctx, ex = std::move(ex), fn, error_response] {
    try {
      fn(ctx, ex);
    } catch (const std::exception& e) {
      LogError("http: handler for {} threw: {}", ex->path(), e.what());
      ex->Send(error_response({ApiStatus::kInternal, "internal error", "server_error", "",
                              "internal_error"}));
    }
  };
  if (ctx->workers == nullptr) return run();
  boost::asio::post(*ctx->workers, std::move(run));
}

ApiError NotReadyError(const ServeContext& ctx) {
  if (ctx.state.load() == ModelState::kFailed) {
    return {ApiStatus::kServiceUnavailable, "the model failed to load; see the server log", "server_error", "",
            "model_failed"};
  }
  return {ApiStatus::kServiceUnavailable, "the model is still loading; poll /ready", "server_error", "",
          "model_not_ready"};
}

void RegisterOpenAiRoutes(ServeContext* ctx) {
  HttpServer* s = ctx->server;
  const RouteOptions probe{.public_route = true, .serve_while_draining = true};
  s->Handle(
      http::verb::get, "/health",
      [](std::shared_ptr<HttpExchange> ex) { ex->Send(JsonResponse(HttpStatus::ok, {{"status", "ok"}})); }, probe);
  s->Handle(http::verb::get, "/ready", [ctx](std::shared_ptr<HttpExchange> ex) { HandleReady(ctx, ex); }, probe);
  s->Handle(http::verb::get, "/metrics", [ctx](std::shared_ptr<HttpExchange> ex) { HandleMetrics(ctx, ex); },
            probe);
  s->Handle(http::verb::get, "/v1/models", [ctx](std::shared_ptr<HttpExchange> ex) { HandleModels(ctx, ex); });
  // Not public: it names the KV event and transfer endpoints (the router
  // sends its --internal-api-key-file credential).
  s->Handle(http::verb::get, "/server_info",
            [ctx](std::shared_ptr<HttpExchange> ex) { HandleServerInfo(ctx, ex); },
            RouteOptions{.serve_while_draining = true});
  s->HandlePrefix(http::verb::get, "/v1/models/", [ctx](std::shared_ptr<HttpExchange> ex) {
    HandleModel(ctx, ex, PercentDecode(ex->path().substr(std::string_view("/v1/models/").size())));
  });
  const RouteOptions json{.json_body = true};
  s->Handle(
      http::verb::post, "/v1/completions",
      [ctx](std::shared_ptr<HttpExchange> ex) { OffIo(ctx, std::move(ex), HandleCompletions); }, json);
  s->Handle(
      http::verb::post, "/v1/chat/completions",
      [ctx](std::shared_ptr<HttpExchange> ex) { OffIo(ctx, std::move(ex), HandleChatCompletions); }, json);
  s->Handle(
      http::verb::post, "/tokenize",
      [ctx](std::shared_ptr<HttpExchange> ex) { OffIo(ctx, std::move(ex), HandleTokenize); }, json);
  s->Handle(
      http::verb::post, "/detokenize",
      [ctx](std::shared_ptr<HttpExchange> ex) { OffIo(ctx, std::move(ex), HandleDetokenize); }, json);
  RegisterReceiptRoutes(ctx);
}

}  // namespace tessera
