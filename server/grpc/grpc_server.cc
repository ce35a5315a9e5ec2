#include "server/grpc/grpc_server.h"
#include "common/log.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>

#include "server/grpc/grpc_service.h"

namespace tessera {

namespace {
constexpr const char* kServiceName = "tessera.v1.Tessera";
constexpr auto kHealthPollInterval = std::chrono::milliseconds(50);
}  // namespace

StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(GrpcServerOptions options,
                                                        ServingEngineProvider engine_provider) {
  if (options.port < 0 || options.port > 65535) {
    return InvalidArgument("grpc port " + std::to_string(options.port) + " is outside [0, 65535]");
  }
  std::unique_ptr<GrpcServer> server(new GrpcServer());
  server->service_ =
      std::make_unique<GrpcService>(std::move(engine_provider), std::move(options.api_keys),
                                    std::move(options.internal_api_key), &server->draining_,
                                    options.request_log);

  // Process-wide switch; must precede BuildAndStart.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  const bool ipv6 = options.host.find(':') != std::string::npos && options.host.front() != '[';
  const std::string address =
      (ipv6 ? "[" + options.host + "]" : options.host) + ":" + std::to_string(options.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &server->port_);
  builder.RegisterService(server->service_.get());
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  if (options.max_threads > 0) {
    grpc::ResourceQuota quota("tessera_grpc");
    quota.SetMaxThreads(options.max_threads);
    builder.SetResourceQuota(quota);
  }
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    if (server->server_) server->server_->Shutdown();
    return Status(StatusCode::kUnavailable, "gRPC server could not bind " + address);
  }
  server->UpdateHealth();
  server->watcher_ = std::thread([s = server.get()] { s->WatchHealth(); });
  LogInfo("gRPC server listening on {}:{}", options.host, server->port_);
  return server;
}

GrpcServer::~GrpcServer() { Shutdown(std::chrono::milliseconds(0)); }

void GrpcServer::UpdateHealth() {
  const int serving = service_->ServingEngineIfReady() != nullptr ? 1 : 0;
  std::lock_guard<std::mutex> lock(mu_);
  if (shut_down_ || serving == health_serving_) return;
  health_serving_ = serving;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  health->SetServingStatus("", serving == 1);
  health->SetServingStatus(kServiceName, serving == 1);
}

void GrpcServer::WatchHealth() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!shut_down_) {
    cv_.wait_for(lock, kHealthPollInterval);
    if (shut_down_) break;
    lock.unlock();
    UpdateHealth();
    lock.lock();
  }
}

void GrpcServer::BeginDrain() {
  draining_.store(true);
  UpdateHealth();
}

void GrpcServer::Shutdown(std::chrono::milliseconds deadline) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    if (server_ != nullptr) {
      grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
      if (health != nullptr) health->Shutdown();  // everything NOT_SERVING from now on
    }
  }
  cv_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (server_ != nullptr) {
    // Past the deadline gRPC cancels the remaining calls; their OnCancel
    // cancels the generations. Returns once every reactor is done.
    server_->Shutdown(std::chrono::system_clock::now() + deadline);
    server_->Wait();
  }
}

}  // namespace tessera
