#include "server/http/openai_routes.h"

#include <ctime>

#include <spdlog/spdlog.h>

#include "server/http/completions.h"

namespace tessera {
namespace {

namespace http = boost::beast::http;
using json = nlohmann::json;

int64_t UnixNow() { return static_cast<int64_t>(std::time(nullptr)); }

ApiError NotReady() {
  return {HttpStatus::service_unavailable, "the model is still loading; poll /ready", "server_error", "",
          "model_not_ready"};
}

void HandleReady(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex) {
  if (ctx->server->draining()) return ex->Send(JsonResponse(HttpStatus::service_unavailable, {{"status", "draining"}}));
  switch (ctx->engine->state()) {
    case EngineState::kReady:
      return ex->Send(JsonResponse(HttpStatus::ok, {{"status", "ready"}}));
    case EngineState::kLoading:
      return ex->Send(JsonResponse(HttpStatus::service_unavailable, {{"status", "loading"}}));
    case EngineState::kFailed:
      return ex->Send(JsonResponse(HttpStatus::service_unavailable, {{"status", "failed"}}));
  }
}

void HandleModels(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex) {
  if (ctx->engine->state() != EngineState::kReady) return ex->Send(ErrorResponse(NotReady()));
  const json model = {{"id", ctx->served_model_name},
                      {"object", "model"},
                      {"created", ctx->created},
                      {"owned_by", "tessera"},
                      {"max_model_len", ctx->engine->info().max_model_len}};
  ex->Send(JsonResponse(HttpStatus::ok, {{"object", "list"}, {"data", json::array({model})}}));
}

// Builds and sends the response for a finished generation (io strand).
void SendCompletion(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex, int64_t prompt_tokens,
                    const GenerateResult& r) {
  if (!r.status.ok()) {
    spdlog::error("completion {} failed: {}", ex->request_id(), r.status.ToString());
    const bool client = r.status.code() == StatusCode::kInvalidArgument ||
                        r.status.code() == StatusCode::kResourceExhausted;
    ApiError e = client ? BadRequest(r.status.message())
                        : ApiError{HttpStatus::internal_server_error, "generation failed: " + r.status.message(),
                                   "server_error", "", "internal_error"};
    return ex->Send(ErrorResponse(e));
  }
  const std::string text = ctx->decoder ? ctx->decoder->Decode(r.tokens) : std::string();
  const std::string id = "cmpl-" + RandomHex(32);
  spdlog::debug("completion {} ({}): {} prompt + {} generated tokens, queued {:.1f} ms, ran {:.1f} ms", id,
                ex->request_id(), prompt_tokens, r.tokens.size(), r.queue_ms, r.run_ms);
  ex->Send(JsonResponse(HttpStatus::ok, MakeCompletionResponse(id, UnixNow(), ctx->served_model_name, text, r.tokens,
                                                               r.hit_eos ? "stop" : "length", prompt_tokens)));
}

void HandleCompletions(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex) {
  if (ctx->engine->state() != EngineState::kReady) return ex->Send(ErrorResponse(NotReady()));
  const EngineInfo& info = ctx->engine->info();
  const CompletionLimits limits{ctx->served_model_name, info.config.vocab_size, info.max_model_len,
                                info.num_kv_blocks, info.block_size};
  CompletionRequest req;
  if (auto err = ParseCompletionRequest(ex->request().body(), limits, &req)) return ex->Send(ErrorResponse(*err));
  const int64_t prompt_tokens = static_cast<int64_t>(req.prompt.size());
  Status s = ctx->engine->Submit({std::move(req.prompt), req.max_tokens}, [ctx, ex, prompt_tokens](GenerateResult r) {
    // Engine thread: hop to the connection's strand before any text work.
    ex->Post([ctx, ex, prompt_tokens, r = std::move(r)] { SendCompletion(ctx, ex, prompt_tokens, r); });
  });
  if (!s.ok()) {
    const bool busy = s.code() == StatusCode::kResourceExhausted;
    ex->Send(ErrorResponse({busy ? HttpStatus::too_many_requests : HttpStatus::service_unavailable, s.message(),
                            busy ? "rate_limit_error" : "server_error", "", busy ? "queue_full" : "unavailable"}));
  }
}

}  // namespace

void RegisterOpenAiRoutes(ServeContext* ctx) {
  HttpServer* s = ctx->server;
  s->Handle(http::verb::get, "/health", [](std::shared_ptr<HttpExchange> ex) {
    ex->Send(JsonResponse(HttpStatus::ok, json::object()));
  });
  s->Handle(http::verb::get, "/ready", [ctx](std::shared_ptr<HttpExchange> ex) { HandleReady(ctx, ex); });
  s->Handle(http::verb::get, "/v1/models", [ctx](std::shared_ptr<HttpExchange> ex) { HandleModels(ctx, ex); });
  s->Handle(http::verb::post, "/v1/completions",
            [ctx](std::shared_ptr<HttpExchange> ex) { HandleCompletions(ctx, ex); });
}

}  // namespace tessera
