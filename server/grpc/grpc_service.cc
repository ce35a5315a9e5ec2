#include "server/grpc/grpc_service.h"
#include "common/log.h"

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <type_traits>


#include "scheduler/block_hash.h"
#include "server/grpc/convert.h"
#include "server/openai/kv_transfer_params.h"
#include "server/record/request_log.h"
#include "server/serving/cache_isolation.h"
#include "server/serving/serving_engine.h"

namespace tessera {
namespace {

using grpc_api::ToGrpc;

// Lets the engine-loop thread reach a reactor that may already be gone.
struct NotifyLink {
  std::mutex mu;
  std::function<void()> target;  // cleared by the reactor's OnDone

  void Fire() {
    std::lock_guard<std::mutex> lock(mu);
    if (target) target();
  }
  void Detach() {
    std::lock_guard<std::mutex> lock(mu);
    target = nullptr;
  }
};

// One Generate call. kStream: a ServerWriteReactor writing each update as it
// is polled (at most one write in flight; updates arriving meanwhile coalesce
// into the next Poll). Unary: accumulates every choice and finishes once.
// Lock order: NotifyLink::mu, then mu_. Generation::Cancel is called with no
// lock held (it may notify inline).
template <bool kStream>
class GenerateCall
    : public std::conditional_t<kStream, grpc::ServerWriteReactor<v1::GenerateResponse>, grpc::ServerUnaryReactor> {
 public:
  // `response`: where the unary result goes (owned by gRPC); null for streams.
  explicit GenerateCall(v1::GenerateResponse* response) : unary_response_(response) {
    link_->target = [this] { OnNotify(); };
  }

  std::function<void()> MakeNotify() {
    std::shared_ptr<NotifyLink> link = link_;
    return [link] { link->Fire(); };
  }

  // Before Submit: the input the receipt records.
  void Record(grpc::CallbackServerContext* ctx, const ReceiptContext* receipts, const GenerateInput& input) {
    ctx_ = ctx;
    receipts_ = receipts;
    recorder_.Begin(0, input);
  }
  // serve --record: append this call to `log` when it finishes (`method`: the RPC's path).
  void RecordTo(record::RequestLog* log, std::string method) {
    log_ = log;
    log_method_ = std::move(method);
    arrival_ = std::chrono::steady_clock::now();
  }

  // The submitted generation: start delivering its updates.
  void Begin(std::shared_ptr<Generation> generation, int32_t n) {
    bool cancel = false;
    std::shared_ptr<Generation> cancelled_gen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      recorder_.SetSeed(0, generation->seed(), generation->seed_drawn());
      gen_ = std::move(generation);
      if constexpr (!kStream) {
        for (int32_t i = 0; i < n; ++i) unary_response_->add_choices()->set_index(i);
        unary_response_->set_request_id(gen_->request_id());
      }
      request_id_ = gen_->request_id();
      cancel = cancelled_;
      cancelled_gen = gen_;
      if (!cancel) PumpLocked();
    }
    if (cancel) cancelled_gen->Cancel();
  }

  // Fails the call before anything was submitted.
  void Fail(const grpc::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    FinishLocked(status);
  }

  void OnCancel() override {
    std::shared_ptr<Generation> gen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      gen = gen_;
      if (!writing_) FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "call cancelled"));
    }
    if (gen) gen->Cancel();  // frees the KV blocks at the engine's next step
  }

  void OnDone() override {
    link_->Detach();
    // The generation may still run (e.g. cancelled): make sure it stops.
    if (gen_ && !gen_->finished()) gen_->Cancel();
    delete this;
  }

 protected:
  void OnNotify() {
    std::lock_guard<std::mutex> lock(mu_);
    PumpLocked();
  }

  void FinishLocked(const grpc::Status& status) {
    if (finish_called_) return;
    finish_called_ = true;
    this->Finish(status);
  }

  void PumpLocked() {
    if (gen_ == nullptr || finish_called_ || writing_) return;
    GenerationUpdate update;
    if constexpr (kStream) {
      if (!gen_->Poll(&update)) return;
      if (!update.status.ok()) return FinishLocked(ToGrpc(update.status));
      recorder_.Add(0, update);
      response_.Clear();
      response_.set_request_id(request_id_);
      for (const ChoiceDelta& d : update.choices) grpc_api::AppendDelta(d, response_.add_choices());
      grpc_api::FillUsage(update, response_.mutable_usage());
      response_.set_finished(update.finished);
      writing_ = true;
      if (update.finished) {
        finish_called_ = true;
        AddReceiptTrailer();
        this->StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
      } else {
        this->StartWrite(&response_);
      }
    } else {
      while (gen_->Poll(&update)) {
        if (!update.status.ok()) return FinishLocked(ToGrpc(update.status));
        recorder_.Add(0, update);
        for (const ChoiceDelta& d : update.choices) {
          if (d.index < 0 || d.index >= unary_response_->choices_size()) continue;
          grpc_api::AppendDelta(d, unary_response_->mutable_choices(d.index));
        }
        grpc_api::FillUsage(update, unary_response_->mutable_usage());
        if (update.finished) {
          unary_response_->set_finished(true);
          AddReceiptTrailer();
          return FinishLocked(grpc::Status::OK);
        }
      }
    }
  }

  // The finished generation's receipt as trailing metadata (docs/architecture.md, "Receipts").
  // With serve --record, also the call's record (docs/architecture.md, "Record
  // and replay"; replay re-runs the requests as executed).
  void AddReceiptTrailer() {
    if (ctx_ != nullptr && receipts_ != nullptr) {
      const receipt::Receipt r = recorder_.Finish(*receipts_);
      ctx_->AddTrailingMetadata("tessera-receipt", receipt::Encode(receipt::Compact(r)));
      if (log_ != nullptr) {
        nlohmann::json line = {{"t_ns", log_->SinceOpenNs(arrival_)},
                               {"endpoint", log_method_},
                               {"body", ""},
                               {"requests", recorder_.CanonicalRequests()},
                               {"receipt", receipt::ToJson(r)}};
        log_->Append(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      }
    }
  }

  std::shared_ptr<NotifyLink> link_ = std::make_shared<NotifyLink>();
  v1::GenerateResponse* unary_response_;
  grpc::CallbackServerContext* ctx_ = nullptr;  // gRPC's; outlives the reactor's Finish
  const ReceiptContext* receipts_ = nullptr;    // the engine's
  ReceiptRecorder recorder_;
  record::RequestLog* log_ = nullptr;  // serve --record; not owned
  std::string log_method_;
  std::chrono::steady_clock::time_point arrival_;
  std::mutex mu_;  // guards everything below
  std::shared_ptr<Generation> gen_;
  std::string request_id_;
  v1::GenerateResponse response_;  // stream: the message being written
  bool writing_ = false;
  bool cancelled_ = false;
  bool finish_called_ = false;
};

using UnaryCall = GenerateCall<false>;

class StreamCall final : public GenerateCall<true> {
 public:
  StreamCall() : GenerateCall<true>(nullptr) {}

  void OnWriteDone(bool ok) override {
    std::shared_ptr<Generation> cancel;
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok || cancelled_) {
        cancel = gen_;
        FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      } else {
        PumpLocked();
      }
    }
    if (cancel) cancel->Cancel();
  }
};

// Submits `request` on a fresh GenerateCall; returns it already finished on error.
template <typename Call>
Call* StartGenerate(Call* call, grpc::CallbackServerContext* ctx, ServingEngine* engine, const grpc::Status& admitted,
                    const v1::GenerateRequest& request, const std::string& tenant, record::RequestLog* log,
                    const char* method) {
  if (!admitted.ok()) {
    call->Fail(admitted);
    return call;
  }
  StatusOr<GenerateInput> input = grpc_api::BuildGenerateInput(openai::RequestModelOf(*engine), request, grpc_api::NewRequestId());
  if (!input.ok()) {
    call->Fail(ToGrpc(input.status()));
    return call;
  }
  input->tenant = tenant;  // --cache-isolation api-key
  const int32_t n = input->request.params.n;
  call->Record(ctx, &engine->receipts(), *input);
  if (log != nullptr) call->RecordTo(log, method);
  StatusOr<std::shared_ptr<Generation>> gen = engine->Submit(std::move(input).value(), call->MakeNotify());
  if (!gen.ok()) {
    call->Fail(ToGrpc(gen.status()));
    return call;
  }
  call->Begin(std::move(gen).value(), n);
  return call;
}

grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, const grpc::Status& status) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(status);
  return reactor;
}

}  // namespace

ServingEngine* GrpcService::ServingEngineIfReady() const {
  ServingEngine* engine = provider_ ? provider_() : nullptr;
  if (engine == nullptr || draining_->load() || engine->draining()) return nullptr;
  return engine;
}

grpc::Status GrpcService::Admit(grpc::CallbackServerContext* ctx, bool for_generate, ServingEngine** engine,
                                std::string* tenant) const {
  if (!api_keys_.empty()) {
    const auto& md = ctx->client_metadata();
    auto it = md.find("authorization");
    std::string auth = it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
    const int key = grpc_api::BearerKeyIndex(auth, api_keys_);
    if (key < 0) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          it == md.end() ? "missing 'authorization: Bearer <key>' metadata" : "invalid API key");
    }
    if (tenant != nullptr) *tenant = api_key_tenants_[static_cast<size_t>(key)];
  }
  *engine = provider_ ? provider_() : nullptr;
  if (*engine == nullptr) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "model is loading");
  if (for_generate && (draining_->load() || (*engine)->draining())) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is draining");
  }
  return grpc::Status::OK;
}

grpc::Status GrpcService::AdmitGenerate(grpc::CallbackServerContext* ctx, const v1::GenerateRequest& request,
                                        ServingEngine** engine, std::string* tenant) const {
  grpc::Status admitted = Admit(ctx, /*for_generate=*/true, engine, tenant);
  if (!admitted.ok()) return admitted;
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  const std::string auth = it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
  const KvTransferCaller caller{.internal_key_configured = !internal_keys_.empty(),
                                .internal = !internal_keys_.empty() && grpc_api::CheckBearer(auth, internal_keys_)};
  if (caller.internal) *tenant = kRouterTenant;
  if (!request.has_kv_transfer_params()) return admitted;
  KvTransferRequest asks;  // the field is there: what it asks is refused as a whole
  asks.do_remote_decode = true;
  if (auto e = CheckKvTransferCaller(asks, caller)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, e->message);
  }
  return admitted;
}

grpc::ServerUnaryReactor* GrpcService::Generate(grpc::CallbackServerContext* ctx, const v1::GenerateRequest* request,
                                                v1::GenerateResponse* response) {
  ServingEngine* engine = nullptr;
  std::string tenant;
  grpc::Status admitted = AdmitGenerate(ctx, *request, &engine, &tenant);
  return StartGenerate(new UnaryCall(response), ctx, engine, admitted, *request, tenant, request_log_,
                       "/tessera.v1.Tessera/Generate");
}

grpc::ServerWriteReactor<v1::GenerateResponse>* GrpcService::GenerateStream(grpc::CallbackServerContext* ctx,
                                                                           const v1::GenerateRequest* request) {
  ServingEngine* engine = nullptr;
  std::string tenant;
  grpc::Status admitted = AdmitGenerate(ctx, *request, &engine, &tenant);
  return StartGenerate(new StreamCall(), ctx, engine, admitted, *request, tenant, request_log_,
                       "/tessera.v1.Tessera/GenerateStream");
}

grpc::ServerUnaryReactor* GrpcService::Tokenize(grpc::CallbackServerContext* ctx, const v1::TokenizeRequest* request,
                                                v1::TokenizeResponse* response) {
  ServingEngine* engine = nullptr;
  if (grpc::Status s = Admit(ctx, false, &engine); !s.ok()) return Done(ctx, s);
  StatusOr<std::vector<int32_t>> ids = grpc_api::TokenizePrompt(openai::RequestModelOf(*engine), *request);
  if (!ids.ok()) return Done(ctx, ToGrpc(ids.status()));
  for (int32_t id : *ids) {
    response->add_token_ids(id);
    const std::string* tok = engine->tokenizer().IdToToken(id);
    response->add_tokens(tok != nullptr ? *tok : std::string());
  }
  response->set_max_model_len(engine->limits().max_model_len);
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* GrpcService::Detokenize(grpc::CallbackServerContext* ctx,
                                                  const v1::DetokenizeRequest* request,
                                                  v1::DetokenizeResponse* response) {
  ServingEngine* engine = nullptr;
  if (grpc::Status s = Admit(ctx, false, &engine); !s.ok()) return Done(ctx, s);
  std::vector<int32_t> ids(request->token_ids().begin(), request->token_ids().end());
  if (Status s = grpc_api::CheckTokenIds(ids, engine->tokenizer().vocab_size(), "token_ids"); !s.ok()) {
    return Done(ctx, ToGrpc(s));
  }
  text::DecodeOptions options;
  options.skip_special_tokens = request->skip_special_tokens();
  StatusOr<std::string> text = engine->tokenizer().Decode(ids, options);
  if (!text.ok()) return Done(ctx, ToGrpc(text.status()));
  response->set_text(*text);
  return Done(ctx, grpc::Status::OK);
}

grpc::ServerUnaryReactor* GrpcService::ListModels(grpc::CallbackServerContext* ctx, const v1::ListModelsRequest*,
                                                  v1::ListModelsResponse* response) {
  ServingEngine* engine = nullptr;
  if (grpc::Status s = Admit(ctx, false, &engine); !s.ok()) return Done(ctx, s);
  v1::ModelInfo* m = response->add_models();
  m->set_id(engine->served_model_name());
  m->set_created(engine->created_unix());
  m->set_max_model_len(engine->limits().max_model_len);
  m->set_vocab_size(engine->limits().vocab_size);
  m->set_has_chat_template(engine->has_chat_template());
  return Done(ctx, grpc::Status::OK);
}

}  // namespace tessera
