#include "server/router/router.h"
#include "common/log.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "server/http/http_server.h"
#include "server/openai/json_body.h"
#include "server/router/http_client.h"
#include "server/router/instance_registry.h"
#include "server/router/kv_router.h"
#include "server/router/messages_proxy.h"
#include "server/router/responses_proxy.h"
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
// Drain (as cli/serve_run.cc's): how often the drain checks what is left, and
// how long requests get to end once the deadline has aborted them (each job
// notices within ~250 ms, HttpCallOptions::abandon).
constexpr auto kDrainPoll = std::chrono::milliseconds(20);
constexpr auto kAbortGrace = std::chrono::seconds(2);

// `shape`: the route's error shape (ErrorResponse, AnthropicErrorResponse).
HttpResponse TooManyRequests(int64_t max_pending, HttpResponse (*shape)(const ApiError&) = ErrorResponse) {
  HttpResponse res = shape({ApiStatus::kTooManyRequests,
                            "the router holds " + std::to_string(max_pending) +
                                " requests (--max-pending-requests); retry later",
                            "server_error", "", "too_many_requests"});
  res.set(http::field::retry_after, "1");
  return res;
}

// A decode (or unified) instance's own answer to `method path`, status and
// body as they came (another instance is tried when one fails); 503 when none
// answers. Blocking: runs on a ProxyPool worker.
HttpResponse ForwardToDecode(InstanceRegistry& registry, const std::string& method, const std::string& path,
                             const std::string& body) {
  // The path goes into the upstream request line, sent with the router's
  // credential: the HTTP parser already refuses such targets, and this keeps
  // the no-smuggling argument local.
  const auto control = [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; };
  if (std::any_of(path.begin(), path.end(), control)) {
    return ErrorResponse(
        {ApiStatus::kBadRequest, "invalid request target", "invalid_request_error", "", "invalid_request"});
  }
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::optional<InstanceRef> inst = registry.Pick(InstanceRole::kDecode);
    if (!inst) break;
    HttpCallResult r;
    if (!HttpCall(inst->host, inst->port, method, path, body, registry.CallOptions(), &r).ok() || r.status == 0 ||
        r.status >= 500) {
      registry.MarkFailed(inst->address);
      continue;
    }
    HttpResponse res{static_cast<HttpStatus>(r.status), 11};
    res.set(http::field::content_type, "application/json");
    res.body() = std::move(r.body);
    res.prepare_payload();
    return res;
  }
  return ErrorResponse({ApiStatus::kServiceUnavailable, "no decode instance answered", "server_error", "",
                        "unavailable"});
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
    LogError("serve --role router: give --decode-instances or --instances-file");
    return 1;
  }
  auto registry = InstanceRegistry::Create(ro);
  if (!registry.ok()) {
    LogError("{}", registry.status().ToString());
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
    LogError("{}", kv_router.status().ToString());
    return 1;
  }
  ProxyContext pctx{registry->get(), &metrics, o.flags, kv_router->get()};
  pctx.flags.isolate_api_keys = o.cache_isolation == "api-key";
  std::atomic<bool> stopping{false};  // the drain deadline passed (ProxyContext::stopping)
  pctx.stopping = &stopping;

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
  // worker runs `job` for the calls to instances. `shape`: the API's errors.
  using Job = std::function<void(const std::shared_ptr<HttpExchange>&, nlohmann::ordered_json)>;
  auto admitted = [&](const char* route, HttpResponse (*shape)(const ApiError&), Job job) {
    return [&, route, shape, job = std::move(job)](std::shared_ptr<HttpExchange> ex) {
      metrics.Request(route);
      ProxyPool::Slot slot = pool.TryAcquire();
      if (!slot) return ex->Send(TooManyRequests(o.max_pending_requests, shape));
      net::post(front_end, [&, shape, job, ex = std::move(ex), slot = std::move(slot)]() mutable {
        nlohmann::ordered_json body;
        if (std::optional<ApiError> e = openai::ParseJsonBounded(ex->request().body(), {}, &body)) {
          return ex->Send(shape(*e));
        }
        pool.Submit(std::move(slot), [job, ex = std::move(ex), body = std::move(body)]() mutable {
          job(ex, std::move(body));
        });
      });
    };
  };
  auto proxy = [&](bool chat, const char* route) {
    return admitted(route, ErrorResponse, [&pctx, chat](const std::shared_ptr<HttpExchange>& ex,
                                                        nlohmann::ordered_json body) {
      RunProxyJob(pctx, ex, chat, std::move(body));
    });
  };
  RouteOptions json_route;
  json_route.json_body = true;
  server.Handle(http::verb::post, "/v1/completions", proxy(false, "/v1/completions"), json_route);
  server.Handle(http::verb::post, "/v1/chat/completions", proxy(true, "/v1/chat/completions"), json_route);
  // The Anthropic Messages API: relayed to one instance (messages_proxy.h).
  auto messages = [&](const char* route) {
    return admitted(route, AnthropicErrorResponse, [&pctx, route](const std::shared_ptr<HttpExchange>& ex,
                                                                  nlohmann::ordered_json body) {
      RunMessagesProxy(pctx, ex, route, std::move(body));
    });
  };
  RouteOptions anthropic_route;
  anthropic_route.json_body = true;
  anthropic_route.error_response = AnthropicErrorResponse;
  server.Handle(http::verb::post, "/v1/messages", messages("/v1/messages"), anthropic_route);
  server.Handle(http::verb::post, "/v1/messages/count_tokens", messages("/v1/messages/count_tokens"),
                anthropic_route);
  // The Responses API: relayed to the instances (responses_proxy.h).
  server.Handle(http::verb::post, "/v1/responses",
                admitted("/v1/responses", ErrorResponse,
                         [&pctx](const std::shared_ptr<HttpExchange>& ex, nlohmann::ordered_json body) {
                           RunResponsesCreateProxy(pctx, ex, std::move(body));
                         }),
                json_route);
  auto by_id = [&](std::shared_ptr<HttpExchange> ex) {  // no body to parse
    metrics.Request("/v1/responses/{id}");
    ProxyPool::Slot slot = pool.TryAcquire();
    if (!slot) return ex->Send(TooManyRequests(o.max_pending_requests, ErrorResponse));
    pool.Submit(std::move(slot), [&pctx, ex = std::move(ex)] { RunResponsesByIdProxy(pctx, ex); });
  };
  for (http::verb verb : {http::verb::get, http::verb::delete_, http::verb::post}) {
    server.HandlePrefix(verb, "/v1/responses/", by_id);
  }
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
  // What an instance answers alone (the model list, tokenization): one
  // decode's answer, passed through, on a pool worker under the same bound.
  // A JSON body goes through the bounded parser first, as a proxied request's.
  auto forward = [&](const char* method, const char* route, bool json_body) {
    return [&, method, route, json_body](std::shared_ptr<HttpExchange> ex) {
      metrics.Request(route);
      ProxyPool::Slot slot = pool.TryAcquire();
      if (!slot) return ex->Send(TooManyRequests(o.max_pending_requests));
      auto run = [&, method, ex] { ex->Send(ForwardToDecode(**registry, method, ex->path(), ex->request().body())); };
      if (!json_body) return pool.Submit(std::move(slot), std::move(run));
      net::post(front_end, [&, ex, slot = std::move(slot), run = std::move(run)]() mutable {
        nlohmann::ordered_json body;
        if (std::optional<ApiError> e = openai::ParseJsonBounded(ex->request().body(), {}, &body)) {
          return ex->Send(ErrorResponse(*e));
        }
        pool.Submit(std::move(slot), std::move(run));
      });
    };
  };
  server.Handle(http::verb::get, "/v1/models", forward("GET", "/v1/models", false));
  server.HandlePrefix(http::verb::get, "/v1/models/", forward("GET", "/v1/models/{id}", false));
  server.Handle(http::verb::post, "/tokenize", forward("POST", "/tokenize", true), json_route);
  server.Handle(http::verb::post, "/detokenize", forward("POST", "/detokenize", true), json_route);

  if (Status s = server.Listen(); !s.ok()) {
    LogError("{}", s.ToString());
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
      LogError("{}", g.status().ToString());
      return 1;
    }
    grpc = std::move(*g);
  }
  if (!o.port_file.empty()) {
    const std::string tmp = o.port_file + ".tmp";
    std::ofstream(tmp) << nlohmann::json{{"http", server.port()}, {"grpc", grpc ? grpc->port() : -1}}.dump() << "\n";
    std::filesystem::rename(tmp, o.port_file);
  }
  LogInfo("serve: role router on http://{}:{} ({} prefill, {} decode instances from flags{}; routing {})",
          server.address(), server.port(), o.flags.prefill_instances.size(), o.flags.decode_instances.size(),
          o.flags.instances_file.empty() ? "" : " + " + o.flags.instances_file, o.flags.routing_logic);
  server.Start();

  // SIGINT/SIGTERM: /ready and new requests get 503 at once; requests in
  // flight finish, and those still running at --drain-timeout are aborted
  // (ProxyContext::stopping: streams end with finish_reason "abort" and
  // [DONE], plain requests get 503, the instances abort their side); exit 0.
  net::signal_set signals(ioc, SIGINT, SIGTERM);
  net::steady_timer timer(ioc);
  std::chrono::steady_clock::time_point deadline;
  std::function<void()> poll = [&] {
    const auto now = std::chrono::steady_clock::now();
    // gRPC calls hold pool places too; the ones left after the abort are
    // cancelled by the gRPC shutdown below (their upstream calls with them).
    const bool idle = stopping.load() ? server.in_flight() == 0 : pool.pending() == 0 && server.in_flight() == 0;
    if (idle || (stopping.load() && now >= deadline)) {
      server.StopAccepting();
      ioc.stop();
      return;
    }
    if (!stopping.load() && now >= deadline) {
      LogWarn("serve: router: {} requests still in flight after {}s; aborting them", pool.pending(),
              o.drain_timeout_s);
      stopping.store(true);
      deadline = now + kAbortGrace;
    }
    timer.expires_after(kDrainPoll);
    timer.async_wait([&](boost::system::error_code) { poll(); });
  };
  signals.async_wait([&](boost::system::error_code ec, int sig) {
    if (ec) return;
    LogInfo("serve: router received signal {}; draining: /ready is 503, new requests get 503; waiting up to "
            "{}s for {} in flight", sig, o.drain_timeout_s, pool.pending());
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
        LogDebug("router: could not lower a front-end worker's priority");
      }
      front_end.run();
    });
  }
  for (int i = 0; i < kIoThreads; ++i) io.emplace_back([&ioc] { ioc.run(); });
  for (auto& t : io) t.join();
  // Nothing is held any more, or the deadline has passed: calls still open end now.
  if (grpc) grpc->Shutdown(std::chrono::milliseconds(0));
  server.MarkStopped();
  LogInfo("serve: router stopped");
  LogFlush();
  // Proxy workers past the drain deadline may still hold references to the
  // locals above: exit without unwinding them.
  std::_Exit(0);
}

}  // namespace tessera
