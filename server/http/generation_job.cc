#include "server/http/generation_job.h"
#include "common/log.h"


#include "server/openai/sse.h"
#include "server/record/request_log.h"
#include "server/serving/cache_isolation.h"

namespace tessera {

namespace http = boost::beast::http;
namespace net = boost::asio;
using Clock = std::chrono::steady_clock;

HttpResponse JobOutput::ErrorAnswer(const ApiError& error) const { return ErrorResponseWithRetry(error); }

std::string JobOutput::StreamError(const ApiError& error) const {
  return openai::SseError(error) + openai::SseDone();
}

GenerationJob::GenerationJob(ServeContext* ctx, ServingEngine* engine, std::shared_ptr<HttpExchange> ex,
                             std::string id, bool stream, std::unique_ptr<JobOutput> output)
    : ctx_(ctx), engine_(engine), ex_(std::move(ex)), stream_(stream), id_(std::move(id)),
      output_(std::move(output)), start_(Clock::now()) {}

GenerationJob::~GenerationJob() {
  if (timer_) timer_->cancel();
}

bool GenerationJob::Submit(std::vector<GenerateInput> inputs) {
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
    recorder_.Begin(i, inputs[i]);
    StatusOr<std::shared_ptr<Generation>> g = engine_->Submit(std::move(inputs[i]), std::move(notify));
    if (!g.ok()) {
      Fail(g.status());
      return false;
    }
    recorder_.SetSeed(i, (*g)->seed(), (*g)->seed_drawn());
    gens_.push_back(*g);
  }
  completion_tokens_.assign(gens_.size(), 0);
  output_->Submitted(gens_);
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

void GenerationJob::Pump() {
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

void GenerationJob::Apply(int prompt_index, const GenerationUpdate& u) {
  completion_tokens_[static_cast<size_t>(prompt_index)] = u.completion_tokens;
  recorder_.Add(static_cast<size_t>(prompt_index), u);
  if (!stream_) return output_->Add(prompt_index, u);
  StartStream();
  ex_->WriteChunk(output_->OnUpdate(prompt_index, u));
}

void GenerationJob::StartStream() {
  if (stream_started_) return;
  stream_started_ = true;
  ex_->StartStream(SseResponseHead());
  ex_->WriteChunk(output_->StreamStart());
}

void GenerationJob::Finish() {
  done_ = true;
  if (timer_) timer_->cancel();
  int64_t completion_tokens = 0;
  for (int64_t n : completion_tokens_) completion_tokens += n;
  const receipt::Receipt r = recorder_.Finish(engine_->receipts());
  output_->SetReceipt(receipt::ToJson(r));
  const std::string receipt_header = output_->ReceiptHeader() ? receipt::Encode(receipt::Compact(r)) : std::string();
  if (ctx_->request_log != nullptr && output_->ReceiptHeader()) Record(r);
  if (stream_) {
    StartStream();
    ex_->WriteChunk(output_->StreamEnd());
    ex_->EndStream();
  } else {
    HttpResponse res = JsonResponse(HttpStatus::ok, output_->Body());
    if (!receipt_header.empty()) res.set(kReceiptHeader, receipt_header);
    ex_->Send(std::move(res));
  }
  LogInfo("{} done: request {} prompt {} tokens, completion {} tokens, {:.1f} ms", id_, ex_->request_id(),
          prompt_tokens_, completion_tokens,
          std::chrono::duration<double, std::milli>(Clock::now() - start_).count());
  self_.reset();
}

// One line of serve --record: when it arrived, where, the body as sent, the
// requests as executed and the full receipt (token ids included). Costs one
// JSON dump of the body and the output on this thread; the write is the log's.
void GenerationJob::Record(const receipt::Receipt& r) {
  const auto& req = ex_->request();
  std::string_view target(req.target().data(), req.target().size());
  target = target.substr(0, target.find('?'));
  nlohmann::json line = {{"t_ns", ctx_->request_log->SinceOpenNs(start_)},
                         {"endpoint", std::string(target)},
                         {"body", req.body()},
                         {"requests", recorder_.CanonicalRequests()},
                         {"receipt", receipt::ToJson(r)}};
  ctx_->request_log->Append(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void GenerationJob::Fail(const Status& status) {
  if (done_) return;
  done_ = true;
  for (auto& g : gens_) g->Cancel();
  if (timer_) timer_->cancel();
  const ApiError error = ErrorFromStatus(status);
  if (error.status == ApiStatus::kInternal) {
    LogError("{} failed: request {}: {}", id_, ex_->request_id(), status.ToString());
  }
  if (error.status == ApiStatus::kTooManyRequests || error.status == ApiStatus::kServiceUnavailable) {
    ctx_->metrics->RequestRejected(error.code);
  }
  if (stream_started_) {
    ex_->WriteChunk(output_->StreamError(error));
    ex_->EndStream();
  } else {
    ex_->Send(output_->ErrorAnswer(error));
  }
  self_.reset();
}

void GenerationJob::Abandon() {
  if (done_) return;
  done_ = true;
  for (auto& g : gens_) g->Cancel();
  LogInfo("{} aborted: client of request {} disconnected", id_, ex_->request_id());
  self_.reset();
}

void GenerationJob::TimedOut() {
  if (done_) return;
  Fail(Status(StatusCode::kDeadlineExceeded, "the request did not finish within the server's request timeout of " +
                                                 std::to_string(ctx_->request_timeout.count()) + " s"));
}

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

void SubmitOnStrand(const ServeContext& ctx, const std::shared_ptr<HttpExchange>& ex,
                    std::shared_ptr<GenerationJob> job, std::vector<GenerateInput> inputs) {
  const std::string tenant = InternalCaller(ctx, *ex) ? std::string(kRouterTenant) : ex->tenant();
  for (GenerateInput& in : inputs) in.tenant = tenant;
  ex->Post([job = std::move(job), inputs = std::move(inputs)]() mutable { job->Submit(std::move(inputs)); });
}

}  // namespace tessera
