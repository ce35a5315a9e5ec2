#include "server/router/router.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/http/http_server.h"
#include "server/openai/json_body.h"
#include "server/router/http_client.h"
#include "server/router/instance_registry.h"
#include "server/router/kv_router.h"
#include "server/router/proxy_job.h"
#include "server/router/proxy_pool.h"
#include "server/router/router_grpc.h"
#include "server/router/router_metrics.h"

namespace tessera {

namespace net = boost::asio;
namespace http = boost::beast::http;

namespace {

// As an instance's front end (cli/serve_run.cc): two io threads frame and
// write; two front-end workers, at a lower priority, parse bodies.
constexpr int kIoThreads = 2;
constexpr int kFrontEndThreads = 2;
constexpr int kFrontEndNice = 5;

HttpResponse TooManyRequests(int64_t max_pending) {
  HttpResponse res = ErrorResponse({ApiStatus::kTooManyRequests,
                                    "the router holds " + std::to_string(max_pending) +
                                        " requests (--max-pending-requests); retry later",
                                    "server_error", "", "too_many_requests"});
  res.set(http::field::retry_after, "1");
  return res;
}

}  // namespace

int RunRouter(const RouterServeOptions& o) {
  InstanceRegistry::Options ro;
  ro.upstream_key = o.internal_api_key;
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
  kro.internal_api_key = o.internal_api_key;
  auto kv_router = KvRouter::Create(kro, registry->get());
  if (!kv_router.ok()) {
    spdlog::error("{}", kv_router.status().ToString());
    return 1;
  }
  ProxyContext pctx{registry->get(), &metrics, o.flags, kv_router->get()};
  pctx.flags.isolate_api_keys = o.cache_isolation == "api-key";

  net::io_context ioc{kIoThreads};
  // Body parsing runs here, never on the io threads.
  net::io_context front_end{kFrontEndThreads};
  auto front_end_guard = net::make_work_guard(front_end);
  ProxyPool pool({.max_pending = o.max_pending_requests, .workers = o.flags.router_workers});
  HttpServerOptions ho;
  ho.host = o.host;
  ho.port = o.port;
  ho.body_limit = o.max_body_bytes;
  ho.idle_timeout = std::chrono::seconds(o.idle_timeout_s);
  ho.api_keys = o.api_keys;
  HttpServer server(ioc, ho);
  // A client request: a place among --max-pending-requests (else 429 at
  // once, on the io thread), the body through the bounded parser on a
  // front-end worker (a refused body is answered there), then a ProxyPool
  // worker for the calls to instances.
  auto proxy = [&](bool chat, const char* route) {
    return [&, chat, route](std::shared_ptr<HttpExchange> ex) {
      metrics.Request(route);
      ProxyPool::Slot slot = pool.TryAcquire();
      if (!slot) return ex->Send(TooManyRequests(o.max_pending_requests));
      net::post(front_end, [&, chat, ex = std::move(ex), slot = std::move(slot)]() mutable {
        nlohmann::ordered_json body;
        if (std::optional<ApiError> e = openai::ParseJsonBounded(ex->request().body(), {}, &body)) {
          return ex->Send(ErrorResponse(*e));
        }
        pool.Submit(std::move(slot), [&pctx, chat, ex = std::move(ex), body = std::move(body)]() mutable {
          RunProxyJob(pctx, ex, chat, std::move(body));
        });
      });
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
    const int64_t running = pool.running();
    body += "# HELP tessera:router_num_requests_running Proxied requests on a router worker.\n"
            "# TYPE tessera:router_num_requests_running gauge\n"
            "tessera:router_num_requests_running " + std::to_string(running) + "\n"
            "# HELP tessera:router_num_requests_waiting Requests held by the router but not on a worker yet "
            "(being parsed or queued).\n"
            "# TYPE tessera:router_num_requests_waiting gauge\n"
            "tessera:router_num_requests_waiting " + std::to_string(std::max<int64_t>(0, pool.pending() - running)) +
            "\n# HELP tessera:router_requests_rejected_total Requests answered 429 past --max-pending-requests.\n"
            "# TYPE tessera:router_requests_rejected_total counter\n"
            "tessera:router_requests_rejected_total " + std::to_string(pool.rejected()) + "\n";
    res.body() = std::move(body);
    ex->Send(std::move(res));
  }, open);
  server.Handle(http::verb::get, "/v1/models", [&](std::shared_ptr<HttpExchange> ex) {
    ProxyPool::Slot slot = pool.TryAcquire();
    if (!slot) return ex->Send(TooManyRequests(o.max_pending_requests));
    pool.Submit(std::move(slot), [&, ex = std::move(ex)] {
      std::optional<InstanceRef> inst = (*registry)->Pick(InstanceRole::kDecode);
      HttpCallResult r;
      if (inst && HttpCall(inst->host, inst->port, "GET", "/v1/models", "", (*registry)->CallOptions(), &r).ok() &&
          r.status == 200) {
        HttpResponse res{HttpStatus::ok, 11};
        res.set(http::field::content_type, "application/json");
        res.body() = r.body;
        ex->Send(std::move(res));
      } else {
        ex->Send(JsonResponse(HttpStatus::service_unavailable,
                              {{"error", {{"message", "no decode instance answered"}, {"type", "server_error"}}}}));
      }
    });
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
    go.admission = &pool;
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
    if ((pool.pending() == 0 && server.in_flight() == 0) || std::chrono::steady_clock::now() >= deadline) {
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
  std::vector<std::thread> io, parsers;
  for (int i = 0; i < kFrontEndThreads; ++i) {
    parsers.emplace_back([&front_end] {
      // Linux: PRIO_PROCESS with a thread id renices that thread only.
      if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kFrontEndNice) != 0) {
        spdlog::debug("router: could not lower a front-end worker's priority");
      }
      front_end.run();
    });
  }
  for (int i = 0; i < kIoThreads; ++i) io.emplace_back([&ioc] { ioc.run(); });
  for (auto& t : io) t.join();
  if (grpc) grpc->Shutdown(std::chrono::seconds(o.drain_timeout_s));
  server.MarkStopped();
  spdlog::info("serve: router stopped");
  spdlog::default_logger()->flush();
  // Proxy workers past the drain deadline may still hold references to the
  // locals above: exit without unwinding them.
  std::_Exit(0);
}

}  // namespace tessera
