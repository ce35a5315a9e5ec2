// The router's gRPC front (`tessera serve --role router --grpc-port P`): the
// tessera.v1.Tessera service of proto/tessera.proto, as a unified server
// serves it, plus grpc.health.v1.Health (SERVING while a decode instance is
// healthy and the router is not draining), with no model.
//
// Generate / GenerateStream take the HTTP router's path (proxy_job.h): the
// prompt is tokenized on an instance, long prompts are prefilled on a prefill
// instance, then the decode instance's own gRPC API runs the request as it
// came plus `kv_transfer_params` (it pulls the prompt's KV) and its messages
// are relayed with the router's request_id. While the client has received
// nothing a failed decode is replaced by another running the same request;
// after that, each unfinished choice continues on another decode from prompt
// + its tokens so far (not for structured outputs, whose grammar state a
// continuation cannot rebuild: the call then fails with UNAVAILABLE).
// Tokenize, Detokenize and ListModels are a decode instance's answers.
//
// A decode's gRPC port comes from its /ready ("grpc_port"): decode instances
// must serve gRPC (--grpc-port) for the router's gRPC front to use them.
//
// Threading: gRPC's synchronous server, one of its threads per call (each
// mostly waiting on an instance); generation calls are bounded by the
// router's --max-pending-requests (RouterGrpcOptions::admission). Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "server/router/proxy_job.h"
#include "server/router/proxy_pool.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace tessera {

struct RouterGrpcOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  std::vector<std::string> api_keys;  // non-empty: "authorization: Bearer <key>" on every Tessera call
  int max_receive_message_bytes = 16 << 20;
  // Generate and GenerateStream take a place here (shared with the HTTP
  // front) or fail with RESOURCE_EXHAUSTED; null: unbounded. Outlives the server.
  ProxyPool* admission = nullptr;
};

class RouterGrpcService;

class RouterGrpcServer {
 public:
  // `ctx` (registry, metrics, flags) must outlive the server.
  static StatusOr<std::unique_ptr<RouterGrpcServer>> Start(const RouterGrpcOptions& options, const ProxyContext* ctx);
  ~RouterGrpcServer();

  int port() const { return port_; }
  // New Generate calls fail with UNAVAILABLE; health turns NOT_SERVING.
  void BeginDrain();
  // Stops accepting calls, waits up to `deadline` for running ones, cancels the rest.
  void Shutdown(std::chrono::milliseconds deadline);

 private:
  RouterGrpcServer() = default;
  void WatchHealth();

  const ProxyContext* ctx_ = nullptr;
  std::unique_ptr<RouterGrpcService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<bool> draining_{false};
  std::atomic<bool> stop_{false};
  std::thread health_;
};

}  // namespace tessera
