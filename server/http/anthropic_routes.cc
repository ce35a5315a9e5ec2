// POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API):
// the body is translated into the chat request of the OpenAI path
// (anthropic/messages_request.h) and prepared by it (openai/request_path.h:
// template, tokens, tool grammar, context length); the job is the same
// GenerationJob; only the output (anthropic/messages_response.h) and the
// error shape are Anthropic's.
#include "server/http/anthropic_routes.h"
#include "common/log.h"


#include "server/anthropic/errors.h"
#include "server/anthropic/messages_request.h"
#include "server/anthropic/messages_response.h"
#include "server/http/generation_job.h"
#include "server/openai/request_path.h"

namespace tessera {
namespace {

namespace http = boost::beast::http;
using json = nlohmann::json;

class MessagesOutput : public JobOutput {
 public:
  std::optional<anthropic::MessageAccumulator> acc;
  std::optional<anthropic::MessageStream> stream;

  void Add(int, const GenerationUpdate& u) override { acc->Add(u); }
  json Body() override { return acc->Build(); }
  std::string OnUpdate(int, const GenerationUpdate& u) override { return stream->OnUpdate(u); }
  std::string StreamEnd() override { return stream->Finish(); }  // "" : message_stop came with the last update
  HttpResponse ErrorAnswer(const ApiError& e) const override { return AnthropicErrorResponse(e); }
  std::string StreamError(const ApiError& e) const override { return anthropic::SseError(e); }
};

anthropic::MessagesParseOptions ParseOptions(const ServeContext& ctx, bool count_tokens) {
  return {.accept_cache_control = ctx.cache_control_retain, .count_tokens = count_tokens};
}

void HandleMessages(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex) {
  ServingEngine* engine = ctx->ready_engine();
  if (engine == nullptr) return ex->Send(AnthropicErrorResponse(NotReadyError(*ctx)));
  openai::RequestModel model = openai::RequestModelOf(*engine);
  model.output = ctx->chat_output;
  anthropic::MessagesRequest req;
  if (auto err = anthropic::ParseMessagesRequest(ex->request().body(), model.limits, ParseOptions(*ctx, false), &req)) {
    return ex->Send(AnthropicErrorResponse(*err));
  }
  if (req.thinking == anthropic::MessagesRequest::Thinking::kEnabled &&
      model.output.reasoning_parser == openai::tools::ReasoningParserKind::kNone) {
    return ex->Send(AnthropicErrorResponse(BadRequest(
        "'thinking': thinking blocks need a reasoning parser: start the server with --reasoning-parser", "thinking")));
  }
  const bool stream = req.chat.stream;
  openai::PreparedChat prepared;
  if (auto err = openai::PrepareParsedChat(model, std::move(req.chat), &prepared)) {
    return ex->Send(AnthropicErrorResponse(*err));
  }
  anthropic::MessageOptions opts{.id = openai::tools::RandomId("msg_"),
                                 .model = engine->served_model_name(),
                                 .output = prepared.output};
  auto out = std::make_unique<MessagesOutput>();
  if (stream) {
    out->stream.emplace(opts);
  } else {
    out->acc.emplace(opts);
  }
  if (!req.user_id.empty()) {  // the client's text in our log: control characters shown as '?'
    std::string shown = req.user_id;
    for (char& ch : shown) ch = static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f ? '?' : ch;
    LogInfo("{}: metadata.user_id {}", opts.id, shown);
  }
  auto job = std::make_shared<GenerationJob>(ctx, engine, ex, opts.id, stream, std::move(out));
  std::vector<GenerateInput> inputs;
  inputs.push_back(std::move(prepared.input));
  SubmitOnStrand(*ctx, ex, std::move(job), std::move(inputs));
}

// {"input_tokens": n}: the rendered prompt's length, as /v1/messages would submit it.
void HandleCountTokens(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex) {
  ServingEngine* engine = ctx->ready_engine();
  if (engine == nullptr) return ex->Send(AnthropicErrorResponse(NotReadyError(*ctx)));
  const openai::RequestModel model = openai::RequestModelOf(*engine);
  anthropic::MessagesRequest req;
  if (auto err = anthropic::ParseMessagesRequest(ex->request().body(), model.limits, ParseOptions(*ctx, true), &req)) {
    return ex->Send(AnthropicErrorResponse(*err));
  }
  openai::TokenizeRequest t;
  t.model = req.chat.model;
  t.is_chat = true;
  t.messages = std::move(req.chat.messages);
  t.tools = std::move(req.chat.tools);
  t.template_kwargs = std::move(req.chat.template_kwargs);
  t.add_generation_prompt = req.chat.add_generation_prompt;
  t.continue_final_message = req.chat.continue_final_message;
  t.add_special_tokens = false;
  std::vector<int32_t> ids;
  if (auto err = openai::PrepareParsedTokenize(model, t, &ids)) return ex->Send(AnthropicErrorResponse(*err));
  ex->Send(JsonResponse(HttpStatus::ok, {{"input_tokens", ids.size()}}));
}

}  // namespace

void RegisterAnthropicRoutes(ServeContext* ctx) {
  const RouteOptions options{.json_body = true, .error_response = AnthropicErrorResponse};
  ctx->server->Handle(
      http::verb::post, "/v1/messages",
      [ctx](std::shared_ptr<HttpExchange> ex) { OffIo(ctx, std::move(ex), HandleMessages, AnthropicErrorResponse); }, options);
  ctx->server->Handle(
      http::verb::post, "/v1/messages/count_tokens",
      [ctx](std::shared_ptr<HttpExchange> ex) { OffIo(ctx, std::move(ex), HandleCountTokens, AnthropicErrorResponse); }, options);
}

}  // namespace tessera
