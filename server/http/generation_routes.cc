// /v1/completions and /v1/chat/completions: parse, tokenize, submit one
// Generation per prompt (a GenerationJob, generation_job.h), then answer as
// JSON or as an SSE stream in OpenAI's shapes.
#include <ctime>
#include <optional>
#include <utility>

#include "server/http/generation_job.h"
#include "server/http/openai_routes.h"
#include "server/openai/chat_request.h"
#include "server/openai/chat_response.h"
#include "server/openai/completion_request.h"
#include "server/openai/completion_response.h"
#include "server/openai/request_common.h"
#include "server/openai/request_path.h"
#include "server/openai/sse.h"

namespace tessera {
namespace {

using json = nlohmann::json;

// What the OpenAI outputs share: the object's id, created and model, the
// chunks as SSE, and the tail (the usage chunk when asked, then [DONE]).
// Receipts: in the body when the request set return_receipt; when streamed,
// in the final chunk (the usage chunk when asked, else the last chunk of the
// last generation to finish, which is held back until the stream ends).
class OpenAiOutput : public JobOutput {
 public:
  OpenAiOutput(std::string id, int64_t created, std::string model, bool include_usage, bool return_receipt)
      : id_(std::move(id)), created_(created), model_(std::move(model)), include_usage_(include_usage),
        return_receipt_(return_receipt) {}

  void SetReceipt(const json& receipt) override { receipt_ = receipt; }

 protected:
  // `finished`: the update ends its generation; its last chunk is held back.
  std::string Sse(std::vector<json> chunks, bool finished) {
    std::string data;
    if (!chunks.empty() && held_) data += openai::SseData(*std::exchange(held_, std::nullopt));
    if (finished && !chunks.empty()) {
      held_ = std::move(chunks.back());
      chunks.pop_back();
    }
    for (const json& c : chunks) data += openai::SseData(c);
    return data;
  }
  std::string Tail(json usage_chunk) {
    std::string data;
    if (held_) {
      if (!include_usage_) (*held_)["receipt"] = receipt_;
      data += openai::SseData(*held_);
      held_.reset();
    }
    if (include_usage_) {
      usage_chunk["receipt"] = receipt_;
      data += openai::SseData(usage_chunk);
    }
    return data + openai::SseDone();
  }
  json WithReceipt(json body) const {
    if (return_receipt_) body["receipt"] = receipt_;
    return body;
  }

  std::string id_;
  int64_t created_;
  std::string model_;
  bool include_usage_;
  bool return_receipt_;
  json receipt_;
  std::optional<json> held_;
};

class CompletionOutput : public OpenAiOutput {
 public:
  using OpenAiOutput::OpenAiOutput;
  std::optional<openai::CompletionAccumulator> acc;
  std::optional<openai::CompletionStream> stream;

  void Add(int i, const GenerationUpdate& u) override { acc->Add(i, u); }
  json Body() override { return WithReceipt(acc->Build(id_, created_, model_)); }
  std::string OnUpdate(int i, const GenerationUpdate& u) override { return Sse(stream->OnUpdate(i, u), u.finished); }
  std::string StreamEnd() override { return Tail(stream->UsageChunk()); }
};

class ChatOutput : public OpenAiOutput {
 public:
  using OpenAiOutput::OpenAiOutput;
  std::optional<openai::ChatAccumulator> acc;
  std::optional<openai::ChatStream> stream;

  void Add(int, const GenerationUpdate& u) override { acc->Add(u); }
  json Body() override { return WithReceipt(acc->Build(id_, created_, model_)); }
  std::string StreamStart() override { return Sse(stream->Start(), false); }
  std::string OnUpdate(int, const GenerationUpdate& u) override { return Sse(stream->OnUpdate(u), u.finished); }
  std::string StreamEnd() override { return Tail(stream->UsageChunk()); }
};

}  // namespace

void HandleCompletions(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex) {
  ServingEngine* engine = ctx->ready_engine();
  if (engine == nullptr) return ex->Send(ErrorResponseWithRetry(NotReadyError(*ctx)));
  openai::PreparedCompletion prepared;
  if (auto err = openai::PrepareCompletion(openai::RequestModelOf(*engine), ex->request().body(), &prepared)) {
    return ex->Send(ErrorResponse(*err));
  }
  if (auto err = CheckKvCaller(*ctx, *ex, prepared.request.kv_transfer)) return ex->Send(ErrorResponse(*err));
  const openai::CompletionRequest& req = prepared.request;
  std::vector<GenerateInput>& inputs = prepared.inputs;
  std::vector<openai::PromptEcho> echoes;
  for (size_t i = 0; req.echo && i < inputs.size(); ++i) {
    const std::vector<int32_t>& ids = inputs[i].request.prompt_token_ids;
    openai::PromptEcho echo;
    if (req.prompts[i].text) {
      echo.text = *req.prompts[i].text;
    } else {
      StatusOr<std::string> t = engine->tokenizer().Decode(ids, {.skip_special_tokens = req.skip_special_tokens});
      echo.text = t.ok() ? *t : std::string();
    }
    if (req.logprobs) echo.first_token = engine->MakeLogprobEntry(ids[0], 0.0f);
    echoes.push_back(std::move(echo));
  }
  const std::string id = "cmpl-" + RandomHex(32);
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  auto out = std::make_unique<CompletionOutput>(id, created, engine->served_model_name(), req.include_usage,
                                                req.return_receipt);
  const int num_prompts = static_cast<int>(inputs.size());
  openai::CompletionOptions opts{req.echo, req.logprobs, req.prompt_logprobs.has_value(), req.return_token_ids};
  if (req.stream) {
    out->stream.emplace(id, created, engine->served_model_name(), num_prompts, req.params.n, opts,
                        req.continuous_usage);
    for (size_t i = 0; i < echoes.size(); ++i) out->stream->SetPromptEcho(static_cast<int>(i), echoes[i]);
  } else {
    out->acc.emplace(num_prompts, req.params.n, opts);
    for (size_t i = 0; i < echoes.size(); ++i) out->acc->SetPromptEcho(static_cast<int>(i), echoes[i]);
  }
  auto job = std::make_shared<GenerationJob>(ctx, engine, ex, id, req.stream, std::move(out));
  SubmitOnStrand(*ctx, ex, std::move(job), std::move(inputs));
}

void HandleChatCompletions(ServeContext* ctx, const std::shared_ptr<HttpExchange>& ex) {
  ServingEngine* engine = ctx->ready_engine();
  if (engine == nullptr) return ex->Send(ErrorResponseWithRetry(NotReadyError(*ctx)));
  openai::PreparedChat prepared;
  openai::RequestModel model = openai::RequestModelOf(*engine);
  model.output = ctx->chat_output;
  if (auto err = openai::PrepareChat(model, ex->request().body(), &prepared)) {
    return ex->Send(ErrorResponse(*err));
  }
  if (auto err = CheckKvCaller(*ctx, *ex, prepared.request.kv_transfer)) return ex->Send(ErrorResponse(*err));
  const openai::ChatRequest& req = prepared.request;
  const std::string id = "chatcmpl-" + RandomHex(32);
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  auto out = std::make_unique<ChatOutput>(id, created, engine->served_model_name(), req.include_usage,
                                          req.return_receipt);
  openai::ChatOptions opts;
  opts.logprobs = req.logprobs;
  opts.top_logprobs = req.top_logprobs;
  opts.echo_prefix = openai::ChatEchoPrefix(req);
  opts.output = prepared.output;
  opts.return_token_ids = req.return_token_ids;
  if (req.stream) {
    out->stream.emplace(id, created, engine->served_model_name(), req.params.n, opts, req.continuous_usage);
  } else {
    out->acc.emplace(req.params.n, opts);
  }
  auto job = std::make_shared<GenerationJob>(ctx, engine, ex, id, req.stream, std::move(out));
  std::vector<GenerateInput> inputs;
  inputs.push_back(std::move(prepared.input));
  SubmitOnStrand(*ctx, ex, std::move(job), std::move(inputs));
}

}  // namespace tessera
