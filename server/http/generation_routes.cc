// /v1/completions and /v1/chat/completions: parse, tokenize, submit one
// Generation per prompt, then answer as JSON or as an SSE stream.
//
// A GenerationJob lives on its connection's strand: every method except the
// notify callback runs there. The engine loop's notify only posts a Pump to
// the strand (coalesced by an atomic flag); the posted handler holds a weak
// reference, so a job whose client left is not kept alive by the engine.
#include <ctime>

#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "server/http/openai_routes.h"
#include "server/openai/chat_request.h"
#include "server/openai/chat_response.h"
#include "server/openai/completion_request.h"
#include "server/openai/completion_response.h"
#include "server/openai/request_common.h"
#include "server/openai/request_path.h"
#include "server/openai/sse.h"
#include "server/serving/cache_isolation.h"

namespace tessera {
namespace {

namespace http = boost::beast::http;
namespace net = boost::asio;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

class GenerationJob : public std::enable_shared_from_this<GenerationJob> {
 public:
  GenerationJob(ServeContext* ctx, ServingEngine* engine, std::shared_ptr<HttpExchange> ex, bool chat, bool stream)
      : ctx_(ctx), engine_(engine), ex_(std::move(ex)), stream_(stream) {
    id_ = (chat ? "chatcmpl-" : "cmpl-") + RandomHex(32);
    created_ = static_cast<int64_t>(std::time(nullptr));
    model_ = engine->served_model_name();
    start_ = Clock::now();
  }
  ~GenerationJob() {
    if (timer_) timer_->cancel();
  }

  const std::string& id() const { return id_; }
  int64_t created() const { return created_; }
  const std::string& model() const { return model_; }

  std::optional<openai::CompletionAccumulator> completion_acc;
  std::optional<openai::CompletionStream> completion_stream;
  std::optional<openai::ChatAccumulator> chat_acc;
  std::optional<openai::ChatStream> chat_stream;
  bool include_usage = false;

  // Submits one generation per input; on failure answers with the error.
  bool Submit(std::vector<GenerateInput> inputs) {
    auto pending = std::make_shared<std::atomic<bool>>(false);
    std::weak_ptr<GenerationJob> weak = weak_from_this();
    std::shared_ptr<HttpExchange> ex = ex_;
    for (size_t i = 0; i < inputs.size(); ++i) {
      inputs[i].request.id = id_ + "-" + std::to_string(i);
      prompt_tokens_ += static_cast<int64_t>(inputs[i].request.prompt_token_ids.size());
      // Runs on the engine-loop thread: post, never touch the job here.
      auto notify = [pending, weak, ex] {
        if (pending->exchange(true)) return;
        ex->Post([pending, weak] {
          pending->store(false);
          if (auto job = weak.lock()) job->Pump();
        });
      };
      StatusOr<std::shared_ptr<Generation>> g = engine_->Submit(std::move(inputs[i]), std::move(notify));
      if (!g.ok()) {
        Fail(g.status());
        return false;
      }
      gens_.push_back(*g);
    }
    completion_tokens_.assign(gens_.size(), 0);
    ex_->OnDisconnect([weak] {
      if (auto job = weak.lock()) job->Abandon();
    });
    if (ctx_->request_timeout.count() > 0) {
      timer_ = std::make_unique<net::steady_timer>(*ctx_->ioc, ctx_->request_timeout);
      timer_->async_wait([weak, ex](boost::system::error_code ec) {
        if (ec) return;
        ex->Post([weak] {
          if (auto job = weak.lock()) job->TimedOut();
        });
      });
    }
    // The job is kept alive by the exchange's callbacks only weakly; it owns itself until done.
    self_ = shared_from_this();
    Pump();
    return true;
  }

 private:
  void Pump() {
    if (done_) return;
    bool all_finished = true;
    for (size_t i = 0; i < gens_.size(); ++i) {
      GenerationUpdate u;
      while (gens_[i]->Poll(&u)) {
        if (!u.status.ok()) return Fail(u.status);
        Apply(static_cast<int>(i), u);
        if (done_) return;  // the client went away while writing
      }
      all_finished = all_finished && gens_[i]->finished();
    }
    if (all_finished) Finish();
  }

  void Apply(int prompt_index, const GenerationUpdate& u) {
    completion_tokens_[static_cast<size_t>(prompt_index)] = u.completion_tokens;
    if (!stream_) {
      if (completion_acc) completion_acc->Add(prompt_index, u);
      if (chat_acc) chat_acc->Add(u);
      return;
    }
    StartStream();
    std::vector<json> chunks =
        completion_stream ? completion_stream->OnUpdate(prompt_index, u) : chat_stream->OnUpdate(u);
    std::string data;
    for (const json& c : chunks) data += openai::SseData(c);
    ex_->WriteChunk(std::move(data));
  }

  void StartStream() {
    if (stream_started_) return;
    stream_started_ = true;
    ex_->StartStream(SseResponseHead());
    if (chat_stream) {
      std::string data;
      for (const json& c : chat_stream->Start()) data += openai::SseData(c);
      ex_->WriteChunk(std::move(data));
    }
  }

  void Finish() {
    done_ = true;
    if (timer_) timer_->cancel();
    int64_t completion_tokens = 0;
    for (int64_t n : completion_tokens_) completion_tokens += n;
    if (stream_) {
      StartStream();
      std::string tail;
      if (include_usage) {
        tail += openai::SseData(completion_stream ? completion_stream->UsageChunk() : chat_stream->UsageChunk());
      }
      tail += openai::SseDone();
      ex_->WriteChunk(std::move(tail));
      ex_->EndStream();
    } else {
      json body = completion_acc ? completion_acc->Build(id_, created_, model_) : chat_acc->Build(id_, created_, model_);
      ex_->Send(JsonResponse(HttpStatus::ok, body));
    }
    spdlog::info("{} done: request {} prompt {} tokens, completion {} tokens, {:.1f} ms", id_, ex_->request_id(),
                 prompt_tokens_, completion_tokens,
                 std::chrono::duration<double, std::milli>(Clock::now() - start_).count());
    self_.reset();
  }

  void Fail(const Status& status) {
    if (done_) return;
    done_ = true;
    for (auto& g : gens_) g->Cancel();
    if (timer_) timer_->cancel();
    const ApiError error = ErrorFromStatus(status);
    if (error.status == ApiStatus::kInternal) {
      spdlog::error("{} failed: request {}: {}", id_, ex_->request_id(), status.ToString());
    }
    if (error.status == ApiStatus::kTooManyRequests || error.status == ApiStatus::kServiceUnavailable) {
      ctx_->metrics->RequestRejected(error.code);
    }
    if (stream_started_) {
      ex_->WriteChunk(openai::SseError(error) + openai::SseDone());
      ex_->EndStream();
    } else {
      ex_->Send(ErrorResponseWithRetry(error));
    }
    self_.reset();
  }

  void Abandon() {
    if (done_) return;
    done_ = true;
    for (auto& g : gens_) g->Cancel();
    spdlog::info("{} aborted: client of request {} disconnected", id_, ex_->request_id());
    self_.reset();
  }

  void TimedOut() {
    if (done_) return;
    Fail(Status(StatusCode::kDeadlineExceeded,
                "the request did not finish within the server's request timeout of " +
                    std::to_string(ctx_->request_timeout.count()) + " s"));
  }

  ServeContext* ctx_;
  ServingEngine* engine_;
  std::shared_ptr<HttpExchange> ex_;
  bool stream_;
  std::string id_;
  int64_t created_ = 0;
  std::string model_;
  Clock::time_point start_;
  std::vector<std::shared_ptr<Generation>> gens_;
  std::unique_ptr<net::steady_timer> timer_;
  std::shared_ptr<GenerationJob> self_;  // until done
  bool stream_started_ = false;
  bool done_ = false;
  int64_t prompt_tokens_ = 0;
  std::vector<int64_t> completion_tokens_;  // per generation, running totals
};

// The handlers run on a front-end worker; a job lives on its connection's
// strand from Submit on.
// kv_transfer_params only from the internal key's holder (docs/architecture.md, "Threat model").
// The caller presented the internal key (the router, or another deployment role).
bool InternalCaller(const ServeContext& ctx, const HttpExchange& ex) {
  if (ctx.internal_api_keys.empty()) return false;
  const auto auth = ex.request().find(http::field::authorization);
  const std::string_view value = auth == ex.request().end()
                                     ? std::string_view()
                                     : std::string_view(auth->value().data(), auth->value().size());
  return ApiKeyMatches(value, ctx.internal_api_keys);
}

std::optional<ApiError> CheckKvCaller(const ServeContext& ctx, const HttpExchange& ex, const KvTransferRequest& kv) {
  return CheckKvTransferCaller(kv, {.internal_key_configured = !ctx.internal_api_keys.empty(),
                                    .internal = InternalCaller(ctx, ex)});
}

// --cache-isolation api-key: the matched key's namespace; the router's requests
// come with their cache_salt already in the client key's namespace.
void SubmitOnStrand(const ServeContext& ctx, const std::shared_ptr<HttpExchange>& ex,
                    std::shared_ptr<GenerationJob> job, std::vector<GenerateInput> inputs) {
  const std::string tenant = InternalCaller(ctx, *ex) ? std::string(kRouterTenant) : ex->tenant();
  for (GenerateInput& in : inputs) in.tenant = tenant;
  ex->Post([job = std::move(job), inputs = std::move(inputs)]() mutable { job->Submit(std::move(inputs)); });
}

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
  auto job = std::make_shared<GenerationJob>(ctx, engine, ex, /*chat=*/false, req.stream);
  const int num_prompts = static_cast<int>(inputs.size());
  openai::CompletionOptions opts{req.echo, req.logprobs, req.prompt_logprobs.has_value(), req.return_token_ids};
  if (req.stream) {
    job->completion_stream.emplace(job->id(), job->created(), job->model(), num_prompts, req.params.n, opts,
                                   req.continuous_usage);
    for (size_t i = 0; i < echoes.size(); ++i) job->completion_stream->SetPromptEcho(static_cast<int>(i), echoes[i]);
  } else {
    job->completion_acc.emplace(num_prompts, req.params.n, opts);
    for (size_t i = 0; i < echoes.size(); ++i) job->completion_acc->SetPromptEcho(static_cast<int>(i), echoes[i]);
  }
  job->include_usage = req.include_usage;
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
  auto job = std::make_shared<GenerationJob>(ctx, engine, ex, /*chat=*/true, req.stream);
  openai::ChatOptions opts;
  opts.logprobs = req.logprobs;
  opts.top_logprobs = req.top_logprobs;
  opts.echo_prefix = openai::ChatEchoPrefix(req);
  opts.output = prepared.output;
  opts.return_token_ids = req.return_token_ids;
  if (req.stream) {
    job->chat_stream.emplace(job->id(), job->created(), job->model(), req.params.n, opts, req.continuous_usage);
  } else {
    job->chat_acc.emplace(req.params.n, opts);
  }
  job->include_usage = req.include_usage;
  std::vector<GenerateInput> inputs;
  inputs.push_back(std::move(prepared.input));
  SubmitOnStrand(*ctx, ex, std::move(job), std::move(inputs));
}

}  // namespace tessera
