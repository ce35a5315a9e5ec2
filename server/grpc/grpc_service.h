// GrpcService: the callback-API implementation of tessera.v1.Tessera.
// Internal to GrpcServer (grpc_server.h).
//
// Threading: handlers run on gRPC's callback threads. Each Generate call is a
// reactor owning its Generation; the engine's notify (loop thread) reaches the
// reactor through a shared NotifyLink that the reactor detaches in OnDone, so
// a late notify never touches a deleted reactor.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "proto/tessera.grpc.pb.h"
#include "scheduler/block_hash.h"
#include "server/grpc/grpc_server.h"

namespace tessera {

class GrpcService final : public v1::Tessera::CallbackService {
 public:
  GrpcService(ServingEngineProvider provider, std::vector<std::string> api_keys, std::string internal_api_key,
              const std::atomic<bool>* draining, record::RequestLog* request_log = nullptr)
      : provider_(std::move(provider)), api_keys_(std::move(api_keys)), draining_(draining),
        request_log_(request_log) {
    if (!internal_api_key.empty()) internal_keys_.push_back(std::move(internal_api_key));
    for (const std::string& key : api_keys_) api_key_tenants_.push_back(ApiKeyTenantId(key));
  }

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* ctx, const v1::GenerateRequest* request,
                                     v1::GenerateResponse* response) override;
  grpc::ServerWriteReactor<v1::GenerateResponse>* GenerateStream(grpc::CallbackServerContext* ctx,
                                                                const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* ctx, const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* ctx, const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx, const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;

  // The engine when loaded and not draining; else null (serving status).
  ServingEngine* ServingEngineIfReady() const;

 private:
  // OK with the engine, or UNAUTHENTICATED / UNAVAILABLE. `for_generate`:
  // also refuse while draining.
  // `tenant` (optional): set to the matched API key's id (ApiKeyTenantId).
  grpc::Status Admit(grpc::CallbackServerContext* ctx, bool for_generate, ServingEngine** engine,
                     std::string* tenant = nullptr) const;
  // Admit, then: with an internal key configured, a request carrying
  // kv_transfer_params must have presented that key (INVALID_ARGUMENT naming
  // the field otherwise), as on HTTP. A caller holding the internal key (the
  // router) gets kRouterTenant: its cache_salt is already namespaced.
  grpc::Status AdmitGenerate(grpc::CallbackServerContext* ctx, const v1::GenerateRequest& request,
                             ServingEngine** engine, std::string* tenant) const;

  ServingEngineProvider provider_;
  std::vector<std::string> api_keys_;
  std::vector<std::string> api_key_tenants_;  // ApiKeyTenantId of each key, computed once
  std::vector<std::string> internal_keys_;  // zero or one
  const std::atomic<bool>* draining_;  // owned by GrpcServer
  record::RequestLog* request_log_;    // serve --record; not owned; may be null
};

}  // namespace tessera
