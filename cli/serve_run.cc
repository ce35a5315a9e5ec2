#include "cli/serve_run.h"
#include "common/log.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/default_model.h"
#include "engine/parallel/shard/rank_group.h"
#include "runtime/backend_registry.h"
#include "server/grpc/grpc_server.h"
#include "server/http/anthropic_routes.h"
#include "server/http/http_server.h"
#include "server/http/responses_routes.h"
#include "server/responses/redis_response_store.h"
#include "server/responses/response_store.h"
#include "server/http/openai_routes.h"
#include "server/kv_events/kv_event_publisher.h"
#include "server/router/router.h"
#include "server/serving/metrics.h"
#include "server/serving/serving_engine.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
namespace net = boost::asio;

constexpr int kIoThreads = 2;  // HTTP framing and SSE only; the engine has its own thread
// Front-end workers: body parsing, validation, chat templates, tokenization.
// They run at a lower priority (nice) than the io threads, so a flood of heavy
// bodies slows its own requests, not /health or the streams being written.
constexpr int kWorkerThreads = 2;
constexpr int kWorkerNice = 5;
constexpr auto kDrainPoll = std::chrono::milliseconds(20);
// After the drain deadline aborts what is left: time for the aborted requests'
// final chunks to be written (an engine step, then the sockets) before exit.
constexpr auto kAbortGrace = std::chrono::seconds(5);

// --tool-call-parser, or the format the chat template teaches; --reasoning-parser
// (the harmony format selects both: ResolveChatOutputConfig).
StatusOr<openai::tools::ChatOutputConfig> ResolveChatOutput(const ServeOptions& o,
                                                            const text::ChatTemplate* chat_template) {
  std::optional<openai::tools::ReasoningParserKind> reasoning;
  if (o.reasoning_parser != openai::tools::ReasoningParserKind::kNone) reasoning = o.reasoning_parser;
  return openai::tools::ResolveChatOutputConfig(o.tool_parser, reasoning, chat_template);
}

// True when config.json says the checkpoint came from `tessera synth`.
bool IsSyntheticCheckpoint(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  return !j.is_discarded() && j.is_object() && j.contains("tessera_synthetic");
}

// Drives shutdown: readiness drops and new requests get 503 at once; the
// process stops once nothing is in flight or the drain timeout passes. State
// lives on a strand (the io_context runs on several threads).
class Shutdown {
 public:
  Shutdown(net::io_context& ioc, HttpServer& server, ServeContext& ctx, std::chrono::seconds drain_timeout)
      : ioc_(ioc), server_(server), ctx_(ctx), drain_timeout_(drain_timeout), strand_(net::make_strand(ioc)),
        timer_(strand_) {}

  // Extra drain steps (e.g. the gRPC server); set before Begin can run.
  std::function<void()> on_drain;
  std::function<int64_t()> extra_in_flight;

  // Idempotent; thread-safe. A non-zero exit code sticks.
  void Begin(int exit_code) {
    net::post(strand_, [this, exit_code] {
      if (exit_code != 0) exit_code_ = exit_code;
      if (started_) return;
      started_ = true;
      ctx_.draining.store(true);
      if (ServingEngine* e = ctx_.engine.load()) e->BeginDrain();
      server_.BeginDrain();
      if (on_drain) on_drain();
      LogInfo("serve: draining: /ready is 503, new requests get 503; waiting up to {}s for {} in flight",
              drain_timeout_.count(), InFlight());
      deadline_ = std::chrono::steady_clock::now() + drain_timeout_;
      Poll();
    });
  }
  int exit_code() const { return exit_code_; }  // read after the io_context stopped

 private:
  int64_t InFlight() const {
    int64_t n = server_.in_flight();
    if (ServingEngine* e = ctx_.engine.load()) n = std::max(n, e->num_in_flight());
    if (extra_in_flight) n += extra_in_flight();
    return n;
  }
  void Poll() {
    const int64_t n = InFlight();
    if (n == 0) return Stop();
    const auto now = std::chrono::steady_clock::now();
    if (!aborted_ && now >= deadline_) {
      // Requests still running end now with finish_reason "abort": streams get
      // their final chunk and [DONE], unary clients their response.
      aborted_ = true;
      LogWarn("serve: {} requests still in flight after {}s; aborting them", n, drain_timeout_.count());
      if (ServingEngine* e = ctx_.engine.load()) e->AbortAll();
      deadline_ = now + kAbortGrace;
    } else if (aborted_ && now >= deadline_) {
      LogWarn("serve: {} requests still open {}s after the abort; exiting anyway", n,
              std::chrono::duration_cast<std::chrono::seconds>(kAbortGrace).count());
      return Stop();
    }
    timer_.expires_after(kDrainPoll);
    timer_.async_wait([this](boost::system::error_code) { Poll(); });
  }
  void Stop() {
    server_.StopAccepting();
    ioc_.stop();
  }

  net::io_context& ioc_;
  HttpServer& server_;
  ServeContext& ctx_;
  const std::chrono::seconds drain_timeout_;
  net::strand<net::io_context::executor_type> strand_;
  net::steady_timer timer_;
  bool started_ = false;
  bool aborted_ = false;  // the drain deadline passed and AbortAll was sent
  int exit_code_ = 0;
  std::chrono::steady_clock::time_point deadline_;
};

Status WritePortFile(const std::string& path, int http_port, int grpc_port, int kv_port = -1) {
  if (path.empty()) return Status::Ok();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    nlohmann::json j{{"http", http_port}, {"grpc", grpc_port}};
    if (kv_port >= 0) j["kv_transfer"] = kv_port;
    out << j.dump() << "\n";
    if (!out) return FailedPrecondition("serve: cannot write --port-file " + path);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);  // atomic: readers never see a partial file
  if (ec) return FailedPrecondition("serve: cannot write --port-file " + path + ": " + ec.message());
  return Status::Ok();
}


// Binds the KV event publisher now (a taken port fails the start); null when
// events are off. It outlives the engine (the scheduler holds a reference).
StatusOr<std::shared_ptr<kv_events::KvEventPublisher>> StartKvEvents(const ServeOptions& o) {
  if (!o.kv_events) return std::shared_ptr<kv_events::KvEventPublisher>();
  return kv_events::KvEventPublisher::Start(*o.kv_events);
}

// Where the publisher is (/server_info tells routers where to subscribe) and its counters on /metrics.
void AdvertiseKvEvents(const kv_events::KvEventsConfig& kc, kv_events::KvEventPublisher* publisher,
                       ServeContext* ctx) {
  if (kv_events::PublisherBinds(kc.endpoint)) {
    ctx->kv_events_endpoint = publisher->endpoint();
    ctx->kv_events_replay_endpoint = publisher->replay_endpoint();
    ctx->kv_events_topic = kc.topic;
  } else {
    LogWarn("serve: --kv-events-config endpoint {} has no wildcard host, so the publisher connects to it "
            "(vLLM's rule) and a router cannot subscribe; for `--routing-logic kv-aware` use tcp://*:PORT",
            kc.endpoint);
  }
  ctx->extra_metrics = [publisher] {
    const kv_events::KvEventPublisherStats st = publisher->stats();
    return fmt::format(
        "# HELP tessera:kv_events_published_total KV cache events published (BlockStored, BlockRemoved, "
        "AllBlocksCleared).\n# TYPE tessera:kv_events_published_total counter\n"
        "tessera:kv_events_published_total {}\n"
        "# HELP tessera:kv_event_batches_published_total KV event batches published.\n"
        "# TYPE tessera:kv_event_batches_published_total counter\ntessera:kv_event_batches_published_total {}\n"
        "# HELP tessera:kv_events_dropped_total KV events lost to a full publisher queue.\n"
        "# TYPE tessera:kv_events_dropped_total counter\ntessera:kv_events_dropped_total {}\n"
        "# HELP tessera:kv_event_replays_served_total KV event replay requests answered.\n"
        "# TYPE tessera:kv_event_replays_served_total counter\ntessera:kv_event_replays_served_total {}\n"
        "# HELP tessera:kv_event_subscribers_refused_total CURVE subscribers refused for lacking this "
        "deployment's key.\n"
        "# TYPE tessera:kv_event_subscribers_refused_total counter\ntessera:kv_event_subscribers_refused_total {}\n",
        st.events_published, st.batches_published, st.events_dropped, st.replays_served, st.subscribers_refused);
  };
}

// Where the model is (or will be: the default model is made on first use) and
// what clients call it, known before anything binds.
struct PlannedModel {
  std::string dir;
  std::string served;
};

StatusOr<PlannedModel> PlanModel(const ServeOptions& o) {
  PlannedModel m;
  m.dir = o.model;
  if (o.model.empty()) {
    ASSIGN_OR_RETURN(m.dir, DefaultModelDir(o.default_model_size));
    LogWarn("serve: no --model given, serving the built-in default model: a synthetic qwen3 {} checkpoint "
            "with RANDOM weights ({}); its outputs are meaningless. Pass --model DIR to serve a real "
            "HF checkpoint.",
            o.default_model_size, m.dir);
  } else if (!fs::is_directory(o.model) && !fs::is_regular_file(o.model)) {
    return NotFound("serve: --model " + o.model + " is not a directory or a .gguf file");
  }
  m.served = o.served_model_name;
  if (m.served.empty()) {
    fs::path p = fs::absolute(m.dir).lexically_normal();
    if (!p.has_filename()) p = p.parent_path();  // "dir/" names "dir"
    m.served = p.filename().string();
  }
  if (m.served.empty()) m.served = "default";
  return m;
}

// The loader thread's work: makes the default model if needed, then loads and warms up.
StatusOr<std::unique_ptr<ServingEngine>> LoadEngine(const ServeOptions& o, const PlannedModel& planned,
                                                    std::shared_ptr<kv_events::KvEventPublisher> publisher,
                                                    ServingMetrics* metrics) {
  ASSIGN_OR_RETURN(std::string dir, o.model.empty() ? EnsureDefaultModel(o.default_model_size)
                                                    : StatusOr<std::string>(planned.dir));
  if (IsSyntheticCheckpoint(dir)) {
    LogWarn("serve: {} is a synthetic checkpoint with random weights; completions are meaningless", dir);
  }
  ServingOptions so = o.serving;
  so.loop.model_dir = dir;
  so.loop.scheduler.kv.event_sink = std::move(publisher);
  so.served_model_name = planned.served;
  so.metrics = metrics;
  return ServingEngine::Create(std::move(so));
}

void LogChatOutput(const ServeOptions& o, const openai::tools::ChatOutputConfig& c) {
  LogInfo("serve: chat output parsing: tool calls {}{}, reasoning {}",
          c.tool_parser == openai::tools::ToolParserKind::kNone
                   ? "off"
                   : std::string(openai::tools::ToolParserName(c.tool_parser)),
          !o.tool_parser && c.tool_parser != openai::tools::ToolParserKind::kNone ? " (from the chat template)"
                                                                                        : "",
          c.reasoning_parser == openai::tools::ReasoningParserKind::kNone
                   ? "off"
                   : std::string(openai::tools::ReasoningParserName(c.reasoning_parser)));
}

// A unified, prefill or decode instance (rank 0 of its group).
int RunInstance(const ServeOptions& o) {
  if (o.serving.loop.device == "cuda" && !HaveBackend("cuda")) {
    return Fail(FailedPrecondition("serve: --device cuda: this tessera was built without CUDA; use --device cpu"));
  }
  StatusOr<std::shared_ptr<kv_events::KvEventPublisher>> kv_event_publisher = StartKvEvents(o);
  if (!kv_event_publisher.ok()) return Fail(kv_event_publisher.status());
  StatusOr<PlannedModel> planned = PlanModel(o);
  if (!planned.ok()) return Fail(planned.status());
  const std::string& served = planned->served;

  // Before the io contexts: a job their queues still hold at exit reaches it.
  responses::ResponseStoreOptions store_options;
  store_options.max_bytes = o.responses_store_bytes;
  if (!o.responses_store_url.empty()) {
    responses::RedisResponseStoreOptions redis;
    redis.url = o.responses_store_url;
    redis.ttl_s = o.responses_store_ttl_s;
    auto shared = responses::RedisResponseStore::Create(redis);
    if (!shared.ok()) return Fail(shared.status());
    store_options.shared = std::move(*shared);
  }
  std::unique_ptr<record::RequestLog> request_log;  // written out and joined after the servers stop
  if (!o.record.dir.empty()) {
    StatusOr<std::unique_ptr<record::RequestLog>> log = record::RequestLog::Open(o.record);
    if (!log.ok()) return Fail(log.status());
    request_log = std::move(*log);
    LogInfo("serve: recording finished generations to {} (at most {:.1f} MB)",
            o.record.dir, static_cast<double>(o.record.max_bytes) / (1 << 20));
  }
  net::io_context workers{kWorkerThreads};
  // A shared store's writes run on the workers, never on the I/O strand that finishes a response.
  if (store_options.shared) {
    store_options.run_blocking = [&workers](std::function<void()> fn) { net::post(workers, std::move(fn)); };
  }
  responses::ResponseStore response_store(std::move(store_options));
  net::io_context ioc{kIoThreads};
  auto workers_guard = net::make_work_guard(workers);
  HttpServer server(ioc, o.http);
  ServingMetrics metrics(served);

  ServeContext ctx;
  ctx.server = &server;
  ctx.metrics = &metrics;
  ctx.ioc = &ioc;
  ctx.workers = &workers;
  ctx.served_model_name = served;
  ctx.request_timeout = o.request_timeout;
  ctx.role = o.role;
  if (!o.internal_api_key.empty()) ctx.internal_api_keys = {o.internal_api_key};
  if (*kv_event_publisher) AdvertiseKvEvents(o.kv_events->config, kv_event_publisher->get(), &ctx);
  ctx.cache_control_retain = o.cache_control_retain;
  ctx.response_store = &response_store;
  ctx.request_log = request_log.get();
  ctx.extra_metrics = [&response_store, more = std::move(ctx.extra_metrics)] {
    return fmt::format("# HELP tessera:responses_store_errors_total /v1/responses store operations that failed: "
                       "writes skipped (shared store unavailable, record over its cap) and reads it could not "
                       "answer.\n# TYPE tessera:responses_store_errors_total counter\n"
                       "tessera:responses_store_errors_total {}\n",
                       response_store.errors()) +
           (more ? more() : std::string());
  };
  RegisterOpenAiRoutes(&ctx);
  RegisterAnthropicRoutes(&ctx);
  RegisterResponsesRoutes(&ctx);
  Shutdown shutdown(ioc, server, ctx, o.drain_timeout);

  if (Status s = server.Listen(); !s.ok()) return Fail(s);
  const std::string url = "http://" + server.address() + ":" + std::to_string(server.port());
  std::unique_ptr<GrpcServer> grpc;
  if (o.grpc) {
    GrpcServerOptions grpc_options = *o.grpc;
    grpc_options.request_log = request_log.get();
    StatusOr<std::unique_ptr<GrpcServer>> g = GrpcServer::Start(std::move(grpc_options),
                                                                [&ctx] { return ctx.ready_engine(); });
    if (!g.ok()) return Fail(g.status());
    grpc = std::move(*g);
    shutdown.on_drain = [&grpc] { grpc->BeginDrain(); };
  }
  const int grpc_port = grpc ? grpc->port() : -1;
  ctx.grpc_port.store(grpc_port);  // a router reads it on /ready (decode and unified pools)
  if (Status s = WritePortFile(o.port_file, server.port(), grpc_port); !s.ok()) return Fail(s);
  LogInfo("serve: HTTP on {}, gRPC on {} (model '{}' loading; /health and /ready answer now){}", url,
          grpc ? o.http.host + ":" + std::to_string(grpc_port) : std::string("off"), served,
          o.http.api_keys.empty() ? "" : "; API key required");
  server.Start();

  net::signal_set signals(ioc, SIGINT, SIGTERM);
  std::function<void(boost::system::error_code, int)> on_signal = [&](boost::system::error_code ec, int sig) {
    if (ec) return;
    if (ctx.draining.load()) {
      LogWarn("serve: second signal {}, exiting now", sig);
      LogFlush();
      std::_Exit(1);
    }
    LogInfo("serve: received signal {}", sig);
    shutdown.Begin(0);
    signals.async_wait(on_signal);
  };
  signals.async_wait(on_signal);

  // The model loads off the io threads, so probes answer meanwhile.
  std::unique_ptr<ServingEngine> engine;
  std::thread loader([&] {
    StatusOr<std::unique_ptr<ServingEngine>> e = LoadEngine(o, *planned, *kv_event_publisher, &metrics);
    if (!e.ok()) {
      ctx.state.store(ModelState::kFailed);
      LogError("serve: model failed to load: {}", e.status().ToString());
      shutdown.Begin(1);
      return;
    }
    engine = std::move(*e);
    if (const KvTransport* kt = engine->kv_transport()) {
      // The KV port is known only now; the file is rewritten with it.
      if (Status s = WritePortFile(o.port_file, server.port(), grpc ? grpc->port() : -1, kt->port()); !s.ok()) {
        LogError("{}", s.ToString());
      }
      LogInfo("serve: role {}: KV transfer on {}:{}", o.role, kt->host(), kt->port());
    }
    StatusOr<openai::tools::ChatOutputConfig> chat_output = ResolveChatOutput(o, engine->chat_template());
    if (!chat_output.ok()) {
      ctx.state.store(ModelState::kFailed);
      LogError("serve: {}", chat_output.status().ToString());
      shutdown.Begin(1);
      return;
    }
    ctx.chat_output = *chat_output;
    LogChatOutput(o, ctx.chat_output);
    ctx.engine.store(engine.get(), std::memory_order_release);
    if (ctx.draining.load()) engine->BeginDrain();
    ctx.state.store(ModelState::kReady, std::memory_order_release);
    LogInfo("serve: ready: model '{}' (max model length {}, KV cache {:.0f} MiB) at {}", served,
            engine->limits().max_model_len, engine->kv_cache_bytes() / 1048576.0, url);
  });

  std::vector<std::thread> io_threads;
  std::vector<std::thread> worker_threads;
  for (int i = 0; i < kWorkerThreads; ++i) {
    worker_threads.emplace_back([&workers] {
      // Linux: PRIO_PROCESS with a thread id renices that thread only.
      if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kWorkerNice) != 0) {
        LogDebug("serve: could not lower a front-end worker's priority");
      }
      workers.run();
    });
  }
  for (int i = 0; i < kIoThreads; ++i) io_threads.emplace_back([&ioc] { ioc.run(); });
  for (auto& t : io_threads) t.join();
  server.MarkStopped();
  // Work still queued finds its exchanges stopped (their methods are no-ops).
  workers_guard.reset();
  workers.stop();
  for (auto& t : worker_threads) t.join();
  response_store.FlushWrites();  // responses finished in the drain: their shared-store writes the workers dropped

  if (ctx.state.load() == ModelState::kLoading) {
    // Model::Load and synthesis cannot be interrupted; a partial default model
    // lives in a temporary directory that the next run removes.
    LogWarn("serve: interrupted while loading the model; exiting");
    LogFlush();
    std::_Exit(shutdown.exit_code());
  }
  loader.join();
  if (grpc) grpc->Shutdown(std::chrono::milliseconds(1000));  // cancels streams that outlived the drain
  if (engine) engine->Stop();  // aborts whatever outlived the drain
  LogInfo("serve: stopped");
  return shutdown.exit_code();
}

}  // namespace

int RunServe(const ServeOptions& o) {
  // Every role talks to peers that may die mid-write (clients, Redis, Gloo ranks,
  // instances behind a router): a write to a closed socket must be an EPIPE error
  // on that connection, never a SIGPIPE that ends the daemon.
  std::signal(SIGPIPE, SIG_IGN);
  if (o.role == "router") return RunRouter(o.router);
  const parallel::GroupOptions& group = o.serving.loop.parallel;
  if (StatusOr<bool> worker = parallel::IsWorkerProcess(group); !worker.ok()) {
    return Fail(worker.status());
  } else if (*worker) {
    // A rank of a multi-process group other than 0: no API, runs the leader's plans.
    if (o.model.empty()) return Fail(InvalidArgument("serve: worker ranks (--node-rank > 0) need --model"));
    Status s = parallel::RunWorkerProcess(group, o.model, o.serving.loop.num_threads);
    if (!s.ok()) return Fail(s);
    LogInfo("serve: worker rank stopped by the leader");
    return 0;
  }
  return RunInstance(o);
}

StatusOr<OfflineEngine> LoadOfflineEngine(const ServeOptions& o) {
  if (o.serving.loop.parallel.launch.nnodes > 1) {
    return FailedPrecondition("a multi-node rank group cannot run offline; run on one node");
  }
  ASSIGN_OR_RETURN(PlannedModel planned, PlanModel(o));
  OfflineEngine out;
  ASSIGN_OR_RETURN(out.engine, LoadEngine(o, planned, /*publisher=*/nullptr, /*metrics=*/nullptr));
  ASSIGN_OR_RETURN(out.chat_output, ResolveChatOutput(o, out.engine->chat_template()));
  return out;
}

}  // namespace tessera
