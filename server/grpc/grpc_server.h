// GrpcServer: the tessera.v1.Tessera gRPC service (proto/tessera.proto) plus
// the standard grpc.health.v1.Health service, over a ServingEngine.
//
// The engine may still be loading when the server starts: `engine_provider`
// returns null until it is ready, and until then Generate/Tokenize/... fail
// with UNAVAILABLE "model is loading" and health reports NOT_SERVING.
//
// Threading: gRPC's callback API runs the handlers on gRPC's own threads; the
// engine's notify callbacks (engine-loop thread) only schedule writes. All
// public methods are thread-safe. Shutdown before destroying the engine.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace tessera {
namespace record {
class RequestLog;
}  // namespace record


class ServingEngine;

// Returns the loaded engine, or null while it is loading. Must be thread-safe
// and cheap (e.g. read an std::atomic<ServingEngine*>); the engine it returns
// must stay alive until GrpcServer::Shutdown returns.
using ServingEngineProvider = std::function<ServingEngine*()>;

struct GrpcServerOptions {
  std::string host = "127.0.0.1";
  int port = 50051;  // 0: the OS picks one; see GrpcServer::port()
  // Non-empty: every Tessera RPC needs "authorization: Bearer <one of these>"
  // (health checks do not).
  std::vector<std::string> api_keys;
  // --internal-api-key-file's key ("" : none): with one, only calls that
  // present it may carry kv_transfer_params (docs/architecture.md, "Threat model").
  std::string internal_api_key;
  int max_receive_message_bytes = 16 << 20;
  // 0: gRPC's default. Caps gRPC's callback threads (ResourceQuota).
  int max_threads = 0;
  // serve --record (server/record/request_log.h): finished Generate and
  // GenerateStream calls are appended; not owned, outlives the server; null: off.
  record::RequestLog* request_log = nullptr;
};

class GrpcService;

class GrpcServer {
 public:
  // Binds and starts serving. UNAVAILABLE if the address cannot be bound.
  static StatusOr<std::unique_ptr<GrpcServer>> Start(GrpcServerOptions options,
                                                     ServingEngineProvider engine_provider);
  ~GrpcServer();  // Shutdown(0) if not done yet

  int port() const { return port_; }
  // Health turns NOT_SERVING and new Generate calls fail with UNAVAILABLE;
  // running streams continue. Idempotent.
  void BeginDrain();
  // Stops accepting calls, waits up to `deadline` for running ones, then
  // cancels what is left (their generations are cancelled) and returns once
  // every call has finished. Idempotent.
  void Shutdown(std::chrono::milliseconds deadline);

 private:
  GrpcServer() = default;
  void WatchHealth();  // health-watcher thread: mirrors engine readiness
  void UpdateHealth();

  std::unique_ptr<GrpcService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<bool> draining_{false};
  std::mutex mu_;  // guards shut_down_, health_serving_
  std::condition_variable cv_;
  bool shut_down_ = false;
  int health_serving_ = -1;  // last status set: -1 unset, 0 NOT_SERVING, 1 SERVING
  std::thread watcher_;
};

}  // namespace tessera
