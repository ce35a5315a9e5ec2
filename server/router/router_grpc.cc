#include "server/router/router_grpc.h"
#include "common/log.h"

#include <map>
#include <mutex>
#include <optional>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <nlohmann/json.hpp>

#include "proto/tessera.grpc.pb.h"
#include "server/grpc/generate_request.h"
#include "server/grpc/grpc_util.h"
#include "server/router/http_client.h"
#include "server/router/kv_router.h"

namespace tessera {

namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kServiceName = "tessera.v1.Tessera";

// Codes that are the caller's answer (the instance judged the request), not
// the instance failing: passed to the client as they came.
bool IsClientError(grpc::StatusCode c) {
  return c == grpc::StatusCode::INVALID_ARGUMENT || c == grpc::StatusCode::OUT_OF_RANGE ||
         c == grpc::StatusCode::NOT_FOUND || c == grpc::StatusCode::FAILED_PRECONDITION ||
         c == grpc::StatusCode::UNAUTHENTICATED || c == grpc::StatusCode::PERMISSION_DENIED ||
         c == grpc::StatusCode::CANCELLED || c == grpc::StatusCode::DEADLINE_EXCEEDED;
}

// An instance's HTTP error answer (OpenAI's error object) as a gRPC status.
grpc::Status FromHttpError(int status, const std::string& body) {
  const Json j = Json::parse(body, nullptr, false);
  ApiError e;
  e.status = ApiStatusFromHttp(status);
  e.message = body;
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const Json& err = j["error"];
    if (err.contains("message") && err["message"].is_string()) e.message = err["message"].get<std::string>();
    if (err.contains("param") && err["param"].is_string()) e.param = err["param"].get<std::string>();
    if (err.contains("code") && err["code"].is_string()) e.code = err["code"].get<std::string>();
  }
  return grpc_api::ToGrpc(grpc_api::StatusFromApiError(e));
}

bool Structured(const v1::SamplingParams& p) {
  return (p.has_response_format_type() && p.response_format_type() != "text") || p.has_json_schema() ||
         p.has_guided_json() || p.has_guided_regex() || p.guided_choice_size() > 0 || p.has_guided_grammar();
}

}  // namespace

class RouterGrpcService final : public v1::Tessera::Service {
 public:
  RouterGrpcService(const ProxyContext* ctx, std::vector<std::string> api_keys, const std::atomic<bool>* draining,
                    ProxyPool* admission)
      : ctx_(*ctx), api_keys_(std::move(api_keys)), draining_(draining), admission_(admission) {
    for (const std::string& key : api_keys_) api_key_tenants_.push_back(ApiKeyTenantId(key));
  }

  grpc::Status Generate(grpc::ServerContext* sctx, const v1::GenerateRequest* request,
                        v1::GenerateResponse* response) override {
    ctx_.metrics->Request("grpc:Generate");
    return Run(sctx, *request, nullptr, response);
  }

  grpc::Status GenerateStream(grpc::ServerContext* sctx, const v1::GenerateRequest* request,
                              grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    ctx_.metrics->Request("grpc:GenerateStream");
    return Run(sctx, *request, writer, nullptr);
  }

  grpc::Status Tokenize(grpc::ServerContext* sctx, const v1::TokenizeRequest* request,
                        v1::TokenizeResponse* response) override {
    return Forward(sctx, [&](v1::Tessera::Stub* stub, grpc::ClientContext* c) {
      return stub->Tokenize(c, *request, response);
    });
  }

  grpc::Status Detokenize(grpc::ServerContext* sctx, const v1::DetokenizeRequest* request,
                          v1::DetokenizeResponse* response) override {
    return Forward(sctx, [&](v1::Tessera::Stub* stub, grpc::ClientContext* c) {
      return stub->Detokenize(c, *request, response);
    });
  }

  grpc::Status ListModels(grpc::ServerContext* sctx, const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override {
    return Forward(sctx, [&](v1::Tessera::Stub* stub, grpc::ClientContext* c) {
      return stub->ListModels(c, *request, response);
    });
  }

 private:
  struct Choice {
    std::vector<int32_t> ids;
    bool finished = false;
  };

  // One client call's state.
  struct Call {
    grpc::ServerContext* sctx = nullptr;
    grpc::ServerWriter<v1::GenerateResponse>* writer = nullptr;  // null: unary
    std::string id;
    std::vector<int32_t> prompt;
    std::vector<Choice> choices;
    bool written = false;   // the client has received a message
    bool migrated = false;  // a choice continued on another decode
    bool first_token = false;
    int legs = 0;
    std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
  };

  // `tenant` (optional): the matched key's id (ApiKeyTenantId).
  grpc::Status Admit(grpc::ServerContext* sctx, std::string* tenant = nullptr) const {
    if (api_keys_.empty()) return grpc::Status::OK;
    const auto& md = sctx->client_metadata();
    auto it = md.find("authorization");
    const std::string auth = it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
    if (const int key = grpc_api::BearerKeyIndex(auth, api_keys_); key >= 0) {
      if (tenant != nullptr) *tenant = api_key_tenants_[static_cast<size_t>(key)];
      return grpc::Status::OK;
    }
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        it == md.end() ? "missing 'authorization: Bearer <key>' metadata" : "invalid API key");
  }

  // The decode's stub, its gRPC port read from its /ready; null when it serves no gRPC.
  std::shared_ptr<v1::Tessera::Stub> Stub(const InstanceRef& inst) {
    {
      std::lock_guard lock(mu_);
      if (auto it = stubs_.find(inst.address); it != stubs_.end()) return it->second;
    }
    HttpCallOptions o = ctx_.registry->CallOptions();
    o.connect_timeout = std::chrono::milliseconds(1000);
    o.idle_timeout = std::chrono::milliseconds(2000);
    HttpCallResult r;
    if (!HttpCall(inst.host, inst.port, "GET", "/ready", "", o, &r).ok() || r.status != 200) return nullptr;
    const Json j = Json::parse(r.body, nullptr, false);
    if (!j.is_object() || !j.contains("grpc_port") || !j["grpc_port"].is_number_integer()) {
      LogWarn("router: decode {} serves no gRPC (start it with --grpc-port); skipped for gRPC calls",
              inst.address);
      return nullptr;
    }
    auto channel = grpc::CreateChannel(inst.host + ":" + std::to_string(j["grpc_port"].get<int>()),
                                       grpc::InsecureChannelCredentials());
    auto stub = std::make_shared<v1::Tessera::Stub>(channel);
    std::lock_guard lock(mu_);
    stubs_[inst.address] = stub;
    return stub;
  }

  void Forget(const std::string& address) {
    std::lock_guard lock(mu_);
    stubs_.erase(address);
  }

  // A decode (healthy, serving gRPC, not in `failed`) and its stub.
  std::optional<std::pair<InstanceRef, std::shared_ptr<v1::Tessera::Stub>>> PickDecode(
      std::vector<std::string>* failed) {
    for (int i = 0; i < 8; ++i) {
      std::optional<InstanceRef> inst = ctx_.registry->Pick(InstanceRole::kDecode, *failed);
      if (!inst) return std::nullopt;
      if (auto stub = Stub(*inst)) return std::make_pair(*inst, stub);
      failed->push_back(inst->address);
    }
    return std::nullopt;
  }

  // The first leg's decode, by --routing-logic over the prompt (kv-aware:
  // where its prefix is cached), and its stub. The caller owes Done().
  std::optional<std::pair<RouteDecision, std::shared_ptr<v1::Tessera::Stub>>> ChooseDecode(
      const std::vector<int32_t>& prompt, const std::string& salt, int64_t max_tokens,
      std::vector<std::string>* failed) {
    for (int i = 0; i < 8; ++i) {
      std::optional<RouteDecision> route =
          ctx_.kv_router->Choose(InstanceRole::kDecode, prompt, salt, max_tokens, *failed, false);
      if (!route) return std::nullopt;
      if (auto stub = Stub(route->target)) return std::make_pair(*route, stub);
      ctx_.kv_router->Done(*route, false);
      failed->push_back(route->target.address);
    }
    return std::nullopt;
  }

  // The upstream call carries the router's own credential, never the
  // client's metadata (its key is for the router alone).
  std::unique_ptr<grpc::ClientContext> UpstreamContext(grpc::ServerContext* sctx) const {
    auto c = grpc::ClientContext::FromServerContext(*sctx);
    const std::string key = ctx_.registry->CallOptions().bearer;
    if (!key.empty()) c->AddMetadata("authorization", "Bearer " + key);
    return c;
  }

  template <typename F>
  grpc::Status Forward(grpc::ServerContext* sctx, F call) {
    if (grpc::Status s = Admit(sctx); !s.ok()) return s;
    std::vector<std::string> failed;
    grpc::Status last(grpc::StatusCode::UNAVAILABLE, "no decode instance serving gRPC is available");
    for (int attempt = 0; attempt < 3; ++attempt) {
      auto d = PickDecode(&failed);
      if (!d) break;
      auto c = UpstreamContext(sctx);
      last = call(d->second.get(), c.get());
      if (last.error_code() != grpc::StatusCode::UNAVAILABLE) return last;
      Forget(d->first.address);
      ctx_.registry->MarkFailed(d->first.address);
      failed.push_back(d->first.address);
    }
    return last;
  }

  grpc::Status Run(grpc::ServerContext* sctx, const v1::GenerateRequest& client_request,
                   grpc::ServerWriter<v1::GenerateResponse>* writer, v1::GenerateResponse* response) {
    std::string tenant;
    if (grpc::Status s = Admit(sctx, &tenant); !s.ok()) return s;
    v1::GenerateRequest request = client_request;
    if (ctx_.flags.isolate_api_keys) request.set_cache_salt(TenantCacheSalt(tenant, client_request.cache_salt()));
    if (draining_->load()) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is draining");
    // Held for the whole call, like an HTTP request's place.
    const ProxyPool::Slot slot = admission_ ? admission_->TryAcquire() : nullptr;
    if (admission_ && !slot) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "the router holds its --max-pending-requests requests; retry later");
    }
    bool chat = false;
    StatusOr<std::string> text = grpc_api::GenerateRequestToJson(request, &chat);
    if (!text.ok()) return grpc_api::ToGrpc(text.status());
    const Json body = Json::parse(*text, nullptr, false);
    Call call;
    call.sctx = sctx;
    call.writer = writer;
    call.id = request.request_id().empty() ? grpc_api::NewRequestId() : request.request_id();
    if (request.has_kv_transfer_params()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "'kv_transfer_params' is set by the router; remove it");
    }
    if (request.prompt_case() == v1::GenerateRequest::kTokenIds) {
      call.prompt.assign(request.token_ids().ids().begin(), request.token_ids().ids().end());
    } else if (request.prompt_case() != v1::GenerateRequest::PROMPT_NOT_SET) {
      int status = 0;
      std::string error;
      if (!TokenizeUpstream(ctx_, TokenizeRequestBody(body, chat), &call.prompt, &status, &error)) {
        return status == 503 ? grpc::Status(grpc::StatusCode::UNAVAILABLE, error) : FromHttpError(status, error);
      }
    }
    const int n = request.params().has_n() ? std::max(1, request.params().n()) : 1;
    call.choices.resize(static_cast<size_t>(std::min(n, 128)));
    const Json kv = PrefillUpstream(ctx_, body, chat, call.prompt, call.id);

    // The request as it came (plus the KV handle) while the client has seen nothing.
    std::vector<std::string> failed;
    v1::GenerateRequest up = request;
    if (!kv.is_null()) up.set_kv_transfer_params(kv.dump());
    const std::string salt = CacheSaltOf(body);
    const int64_t max_tokens = request.params().has_max_tokens()
                                   ? int64_t{request.params().max_tokens()} * static_cast<int64_t>(call.choices.size())
                                   : -1;
    for (int attempt = 0; attempt <= ctx_.flags.max_migrations; ++attempt) {
      if (sctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "call cancelled");
      auto route = ChooseDecode(call.prompt, salt, max_tokens, &failed);
      if (!route) break;
      const std::pair<InstanceRef, std::shared_ptr<v1::Tessera::Stub>> d(route->first.target, route->second);
      if (attempt > 0) ctx_.metrics->Migration();
      std::vector<int> identity(call.choices.size());
      for (size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<int>(i);
      grpc::Status s = Leg(&call, d, up, identity, response);
      ctx_.kv_router->Done(route->first, s.ok());
      if (s.ok() || IsClientError(s.error_code())) return s;
      failed.push_back(d.first.address);
      up.clear_kv_transfer_params();
      if (call.written) break;
    }
    if (!call.written) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "router: no decode instance could serve the request over gRPC");
    }
    if (Structured(request.params())) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "the decode instance failed mid-stream, and a structured-output request cannot be "
                          "continued on another instance");
    }
    // Migration: each unfinished choice continues from prompt + its tokens so far.
    for (size_t i = 0; i < call.choices.size(); ++i) {
      Choice& c = call.choices[i];
      for (int attempt = 0; !c.finished && attempt < ctx_.flags.max_migrations; ++attempt) {
        if (sctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "call cancelled");
        auto d = PickDecode(&failed);
        if (!d) break;
        ctx_.metrics->Migration();
        call.migrated = true;
        LogInfo("router: {} choice {}: continuing on decode {} after {} tokens (gRPC)", call.id, i,
                d->first.address, c.ids.size());
        v1::GenerateRequest next = request;
        v1::TokenIds* ids = next.mutable_token_ids();  // clears text/chat
        ids->clear_ids();
        ids->mutable_ids()->Add(call.prompt.begin(), call.prompt.end());
        ids->mutable_ids()->Add(c.ids.begin(), c.ids.end());
        v1::SamplingParams* p = next.mutable_params();
        p->set_n(1);
        const int64_t done = static_cast<int64_t>(c.ids.size());
        if (request.params().has_max_tokens()) {
          p->set_max_tokens(static_cast<int32_t>(std::max<int64_t>(1, request.params().max_tokens() - done)));
        } else if (request.prompt_case() != v1::GenerateRequest::kChat) {
          p->set_max_tokens(static_cast<int32_t>(std::max<int64_t>(1, 16 - done)));  // the completions default
        }
        if (p->has_min_tokens()) p->set_min_tokens(static_cast<int32_t>(std::max<int64_t>(0, p->min_tokens() - done)));
        grpc::Status s = Leg(&call, *d, next, {static_cast<int>(i)}, nullptr);
        if (s.ok()) continue;
        if (IsClientError(s.error_code())) return s;
        failed.push_back(d->first.address);
      }
      if (!c.finished) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE, "router: decode failed for choice " + std::to_string(i) +
                                                                " and no other decode instance could continue it");
      }
    }
    // The last message of a migrated stream: usage over every leg.
    v1::GenerateResponse last;
    last.set_request_id(call.id);
    last.set_finished(true);
    FillUsage(call, &last);
    if (!writer->Write(last)) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    return grpc::Status::OK;
  }

  void FillUsage(const Call& call, v1::GenerateResponse* m) const {
    int64_t completion = 0;
    for (const Choice& c : call.choices) completion += static_cast<int64_t>(c.ids.size());
    m->mutable_usage()->set_prompt_tokens(static_cast<int64_t>(call.prompt.size()));
    m->mutable_usage()->set_completion_tokens(completion);
  }

  // One upstream call; `index_map[j]`: the client's index of upstream choice j.
  // OK: every choice of the leg finished. A unary leg answers the client itself.
  grpc::Status Leg(Call* call, const std::pair<InstanceRef, std::shared_ptr<v1::Tessera::Stub>>& d,
                   v1::GenerateRequest up, const std::vector<int>& index_map, v1::GenerateResponse* response) {
    const InstanceRef& inst = d.first;
    up.set_request_id(call->id + (call->legs++ == 0 ? "" : "-" + std::to_string(call->legs)));
    const int64_t estimate =
        (static_cast<int64_t>(call->prompt.size()) + (up.params().has_max_tokens() ? up.params().max_tokens() : 256)) *
        static_cast<int64_t>(index_map.size());
    ctx_.registry->AddOutstanding(inst.address, estimate);
    auto c = UpstreamContext(call->sctx);
    grpc::Status s;
    if (call->writer == nullptr) {
      s = d.second->Generate(c.get(), up, response);
      if (s.ok()) {
        response->set_request_id(call->id);
        ObserveFirstToken(call);
      }
    } else {
      std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = d.second->GenerateStream(c.get(), up);
      v1::GenerateResponse m;
      bool client_gone = false;
      while (reader->Read(&m)) {
        if (!Relay(call, index_map, &m)) {
          client_gone = true;
          c->TryCancel();
          break;
        }
      }
      s = reader->Finish();
      if (client_gone) s = grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    }
    ctx_.registry->AddOutstanding(inst.address, -estimate);
    bool all_done = true;
    for (int i : index_map) all_done = all_done && call->choices[static_cast<size_t>(i)].finished;
    if (s.ok() && call->writer != nullptr && !all_done) {
      s = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the decode's stream ended with unfinished choices");
    }
    const bool instance_failed = !s.ok() && !IsClientError(s.error_code());
    ctx_.metrics->Decision(inst.address, "decode", !instance_failed);
    if (instance_failed) {
      LogWarn("router: {}: decode {} failed over gRPC ({})", call->id, inst.address, s.error_message());
      Forget(inst.address);
      if (s.error_code() == grpc::StatusCode::UNAVAILABLE) ctx_.registry->MarkFailed(inst.address);
    }
    return s;
  }

  void ObserveFirstToken(Call* call) {
    if (call->first_token) return;
    call->first_token = true;
    ctx_.metrics->ObserveTimeToFirstToken(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - call->arrival).count());
  }

  // One upstream message to the client: choice indices mapped, ids recorded,
  // an "abort" finish withheld (the choice migrates), the router's
  // request_id. false: the client went away.
  bool Relay(Call* call, const std::vector<int>& index_map, v1::GenerateResponse* m) {
    for (v1::ChoiceDelta& ch : *m->mutable_choices()) {
      if (ch.index() < 0 || static_cast<size_t>(ch.index()) >= index_map.size()) continue;
      const int index = index_map[static_cast<size_t>(ch.index())];
      ch.set_index(index);
      Choice& c = call->choices[static_cast<size_t>(index)];
      c.ids.insert(c.ids.end(), ch.token_ids().begin(), ch.token_ids().end());
      if (!ch.token_ids().empty()) ObserveFirstToken(call);
      if (ch.finish_reason() == "abort") {
        ch.clear_finish_reason();
        ch.clear_stop_reason();
      } else if (!ch.finish_reason().empty()) {
        c.finished = true;
      }
    }
    m->set_request_id(call->id);
    bool all_done = true;
    for (const Choice& c : call->choices) all_done = all_done && c.finished;
    // A continuation leg's last message is not the client's last unless every choice is done.
    if (call->migrated) {
      m->set_finished(false);
      FillUsage(*call, m);
      if (m->choices_size() == 0) return true;
    } else if (m->finished() && !all_done) {
      m->set_finished(false);
    }
    call->written = true;
    return call->writer->Write(*m);
  }

  const ProxyContext& ctx_;
  const std::vector<std::string> api_keys_;
  std::vector<std::string> api_key_tenants_;  // ApiKeyTenantId of each key, computed once
  const std::atomic<bool>* draining_;
  ProxyPool* const admission_;
  std::mutex mu_;  // guards stubs_
  std::map<std::string, std::shared_ptr<v1::Tessera::Stub>> stubs_;  // by decode HTTP address
};

StatusOr<std::unique_ptr<RouterGrpcServer>> RouterGrpcServer::Start(const RouterGrpcOptions& options,
                                                                    const ProxyContext* ctx) {
  if (options.port < 0 || options.port > 65535) {
    return InvalidArgument("grpc port " + std::to_string(options.port) + " is outside [0, 65535]");
  }
  std::unique_ptr<RouterGrpcServer> server(new RouterGrpcServer());
  server->ctx_ = ctx;
  server->service_ = std::make_unique<RouterGrpcService>(ctx, options.api_keys, &server->draining_, options.admission);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const bool ipv6 = options.host.find(':') != std::string::npos && options.host.front() != '[';
  const std::string address = (ipv6 ? "[" + options.host + "]" : options.host) + ":" + std::to_string(options.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(server->service_.get());
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    if (server->server_) server->server_->Shutdown();
    return Status(StatusCode::kUnavailable, "gRPC server could not bind " + address);
  }
  server->health_ = std::thread([s = server.get()] { s->WatchHealth(); });
  LogInfo("router: gRPC on {}:{}", options.host, server->port_);
  return server;
}

void RouterGrpcServer::WatchHealth() {
  int last = -1;
  while (!stop_.load()) {
    const int serving = !draining_.load() && ctx_->registry->AnyHealthy(InstanceRole::kDecode) ? 1 : 0;
    if (serving != last) {
      if (grpc::HealthCheckServiceInterface* h = server_->GetHealthCheckService()) {
        h->SetServingStatus("", serving == 1);
        h->SetServingStatus(kServiceName, serving == 1);
      }
      last = serving;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void RouterGrpcServer::BeginDrain() { draining_.store(true); }

void RouterGrpcServer::Shutdown(std::chrono::milliseconds deadline) {
  if (stop_.exchange(true)) return;
  if (health_.joinable()) health_.join();
  server_->Shutdown(std::chrono::system_clock::now() + deadline);
}

RouterGrpcServer::~RouterGrpcServer() { Shutdown(std::chrono::milliseconds(0)); }

}  // namespace tessera
