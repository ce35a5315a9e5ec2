#include "server/router/router.h"

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/http/http_server.h"
#include "server/router/http_client.h"
#include "server/router/instance_registry.h"
#include "server/router/kv_router.h"
#include "server/router/proxy_job.h"
#include "server/router/router_grpc.h"
#include "server/router/router_metrics.h"

namespace tessera {

namespace net = boost::asio;
namespace http = boost::beast::http;

int RunRouter(const RouterServeOptions& o) {
  InstanceRegistry::Options ro;
  ro.prefill = o.flags.prefill_instances;
  ro.decode = o.flags.decode_instances;
  ro.file = o.flags.instances_file;
  ro.poll_interval = std::chrono::milliseconds(static_cast<int64_t>(o.flags.poll_interval_s * 1000));
  ro.dns_interval = std::chrono::milliseconds(static_cast<int64_t>(o.flags.dns_interval_s * 1000));
  if (ro.decode.empty() && ro.file.empty()) {
    spdlog::error("serve --role router: give --decode-instances or --instances-file");
    return 1;
  }
  auto registry = InstanceRegistry::Create(ro);
  if (!registry.ok()) {
    spdlog::error("{}", registry.status().ToString());
    return 1;
  }
  RouterMetrics metrics;
  KvRouterOptions kro;
  kro.logic = *ParseRoutingLogic(o.flags.routing_logic);  // validated with the flags (cli/)
  kro.peer_fetch_min_tokens = o.flags.kv_peer_fetch_min_tokens;
  kro.tick = std::min(kro.tick, ro.poll_interval);
  auto kv_router = KvRouter::Create(kro, registry->get());
  if (!kv_router.ok()) {
    spdlog::error("{}", kv_router.status().ToString());
    return 1;
  }
  ProxyContext pctx{registry->get(), &metrics, o.flags, kv_router->get()};
  pctx.flags.isolate_api_keys = o.cache_isolation == "api-key";

  net::io_context ioc{2};
  HttpServerOptions ho;
  ho.host = o.host;
  ho.port = o.port;
  ho.body_limit = o.max_body_bytes;
  ho.idle_timeout = std::chrono::seconds(o.idle_timeout_s);
  ho.api_keys = o.api_keys;
  HttpServer server(ioc, ho);
  std::atomic<int64_t> jobs{0};
  auto proxy = [&](bool chat, const char* route) {
    return [&, chat, route](std::shared_ptr<HttpExchange> ex) {
      metrics.Request(route);
      ++jobs;
      // Blocking calls to instances: one thread per request (a router serves
      // tens to hundreds of concurrent streams, each mostly waiting).
      std::thread([&, ex = std::move(ex), chat] {
        RunProxyJob(pctx, ex, chat);
        --jobs;
      }).detach();
    };
  };
  RouteOptions json_route;
  json_route.json_body = true;
  server.Handle(http::verb::post, "/v1/completions", proxy(false, "/v1/completions"), json_route);
  server.Handle(http::verb::post, "/v1/chat/completions", proxy(true, "/v1/chat/completions"), json_route);
  RouteOptions open;
  open.public_route = true;
  open.serve_while_draining = true;
  server.Handle(http::verb::get, "/health", [](std::shared_ptr<HttpExchange> ex) {
    ex->Send(JsonResponse(HttpStatus::ok, {{"status", "ok"}}));
  }, open);
  server.Handle(http::verb::get, "/ready", [&](std::shared_ptr<HttpExchange> ex) {
    const bool ready = !server.draining() && (*registry)->AnyHealthy(InstanceRole::kDecode);
    ex->Send(JsonResponse(ready ? HttpStatus::ok : HttpStatus::service_unavailable,
                          {{"status", ready ? "ready" : (server.draining() ? "draining" : "no_decode_instance")}}));
  }, open);
  server.Handle(http::verb::get, "/metrics", [&](std::shared_ptr<HttpExchange> ex) {
    HttpResponse res{HttpStatus::ok, 11};
    res.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    std::string body = metrics.Serialize() + (*kv_router)->SerializeMetrics();
    body += "# HELP tessera:router_instance_healthy Whether the router routes to the instance.\n"
            "# TYPE tessera:router_instance_healthy gauge\n";
    for (const InstanceSnapshot& s : (*registry)->Snapshot()) {
      body += "tessera:router_instance_healthy{instance=\"" + s.ref.address + "\",role=\"" +
              InstanceRoleName(s.role) + "\"} " + (s.healthy ? "1" : "0") + "\n";
    }
    res.body() = std::move(body);
    ex->Send(std::move(res));
  }, open);
  server.Handle(http::verb::get, "/v1/models", [&](std::shared_ptr<HttpExchange> ex) {
    ++jobs;
    std::thread([&, ex = std::move(ex)] {
      std::optional<InstanceRef> inst = (*registry)->Pick(InstanceRole::kDecode);
      HttpCallResult r;
      if (inst && HttpCall(inst->host, inst->port, "GET", "/v1/models", "", {}, &r).ok() && r.status == 200) {
        HttpResponse res{HttpStatus::ok, 11};
        res.set(http::field::content_type, "application/json");
        res.body() = r.body;
        ex->Send(std::move(res));
      } else {
        ex->Send(JsonResponse(HttpStatus::service_unavailable,
                              {{"error", {{"message", "no decode instance answered"}, {"type", "server_error"}}}}));
      }
      --jobs;
    }).detach();
  });

  if (Status s = server.Listen(); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return 1;
  }
  std::unique_ptr<RouterGrpcServer> grpc;
  if (o.grpc_port >= 0) {
    RouterGrpcOptions go;
    go.host = o.host;
    go.port = o.grpc_port;
    go.api_keys = o.api_keys;
    go.max_receive_message_bytes = static_cast<int>(std::min<uint64_t>(o.max_body_bytes, 1u << 30));
    auto g = RouterGrpcServer::Start(go, &pctx);
    if (!g.ok()) {
      spdlog::error("{}", g.status().ToString());
      return 1;
    }
    grpc = std::move(*g);
  }
  if (!o.port_file.empty()) {
    const std::string tmp = o.port_file + ".tmp";
    std::ofstream(tmp) << nlohmann::json{{"http", server.port()}, {"grpc", grpc ? grpc->port() : -1}}.dump() << "\n";
    std::filesystem::rename(tmp, o.port_file);
  }
  spdlog::info("serve: role router on http://{}:{} ({} prefill, {} decode instances from flags{}; routing {})",
               server.address(), server.port(), o.flags.prefill_instances.size(), o.flags.decode_instances.size(),
               o.flags.instances_file.empty() ? "" : " + " + o.flags.instances_file, o.flags.routing_logic);
  server.Start();

  // SIGINT/SIGTERM: stop taking requests, let those in flight finish (bounded), exit.
  net::signal_set signals(ioc, SIGINT, SIGTERM);
  net::steady_timer timer(ioc);
  std::chrono::steady_clock::time_point deadline;
  std::function<void()> poll = [&] {
    if ((jobs.load() == 0 && server.in_flight() == 0) || std::chrono::steady_clock::now() >= deadline) {
      server.StopAccepting();
      ioc.stop();
      return;
    }
    timer.expires_after(std::chrono::milliseconds(20));
    timer.async_wait([&](boost::system::error_code) { poll(); });
  };
  signals.async_wait([&](boost::system::error_code ec, int sig) {
    if (ec) return;
    spdlog::info("serve: router received signal {}; draining", sig);
    server.BeginDrain();
    if (grpc) grpc->BeginDrain();
    deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.drain_timeout_s);
    poll();
  });
  std::vector<std::thread> io;
  for (int i = 0; i < 2; ++i) io.emplace_back([&ioc] { ioc.run(); });
  for (auto& t : io) t.join();
  if (grpc) grpc->Shutdown(std::chrono::seconds(o.drain_timeout_s));
  server.MarkStopped();
  spdlog::info("serve: router stopped");
  spdlog::default_logger()->flush();
  // Detached proxy threads may still hold references to the locals above.
  std::_Exit(0);
}

}  // namespace tessera
