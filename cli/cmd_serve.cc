// `tessera serve`: the OpenAI-compatible HTTP server (and gRPC).
//
// Startup order: bind the listeners and answer /health and /ready at once, then
// load the model (synthesising the default one on first run) and warm up on a
// loader thread; /ready turns 200 when that is done. SIGINT/SIGTERM drain:
// /ready and new requests get 503 at once, in-flight ones finish (those still
// running at --drain-timeout end with finish_reason "abort"), exit 0.
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
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
#include <spdlog/spdlog.h>

#include "runtime/backend_registry.h"
#include "runtime/spec/spec_config.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "server/http/http_server.h"
#include "server/grpc/grpc_server.h"
#include "server/http/openai_routes.h"
#include "server/kv_events/kv_event_publisher.h"
#include "server/router/router.h"
#include "server/serving/metrics.h"
#include "server/serving/serving_engine.h"
#include "cli/serve_flags.h"

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

// --tool-call-parser, or the format the chat template teaches; --reasoning-parser.
openai::tools::ChatOutputConfig ResolveChatOutput(const ServeFlags& f, const text::ChatTemplate* chat_template) {
  openai::tools::ChatOutputConfig c;
  if (!f.tool_call_parser.empty()) {
    c.tool_parser = *openai::tools::ToolParserFromName(f.tool_call_parser);  // checked at startup
  } else if (chat_template != nullptr) {
    c.tool_parser = openai::tools::DetectToolParser(*chat_template);
  }
  if (!f.reasoning_parser.empty()) c.reasoning_parser = *openai::tools::ReasoningParserFromName(f.reasoning_parser);
  return c;
}

parallel::GroupOptions GroupFromFlags(const ServeFlags& f) {
  parallel::GroupOptions g;
  g.tensor_parallel_size = f.tensor_parallel_size;
  g.data_parallel_size = f.data_parallel_size;
  g.enable_expert_parallel = f.enable_expert_parallel;
  g.eplb = *parallel::EplbFromFlags(f.enable_eplb, f.eplb_config, f.num_redundant_experts);  // checked at startup
  g.launch.nnodes = f.nnodes;
  g.launch.node_rank = f.node_rank;
  g.launch.leader_addr = f.leader_addr;
  g.timeout = std::chrono::milliseconds(static_cast<int64_t>(f.parallel_timeout_s * 1000));
  g.launch.timeout = g.timeout;
  return g;
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
      spdlog::info("serve: draining: /ready is 503, new requests get 503; waiting up to {}s for {} in flight",
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
      spdlog::warn("serve: {} requests still in flight after {}s; aborting them", n, drain_timeout_.count());
      if (ServingEngine* e = ctx_.engine.load()) e->AbortAll();
      deadline_ = now + kAbortGrace;
    } else if (aborted_ && now >= deadline_) {
      spdlog::warn("serve: {} requests still open {}s after the abort; exiting anyway", n,
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

// Applies `path` (TOML, CLI11's reader) to the options of `cmd` that were not
// given on the command line. Unknown keys are errors, so typos do not pass silently.
Status ApplyConfigFile(CLI::App* cmd, const std::string& path) {
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const std::exception& e) {
    return InvalidArgument("serve: --config " + path + ": " + e.what());
  }
  for (const CLI::ConfigItem& item : items) {
    if (item.name == "++" || item.name == "--") continue;  // section markers
    const std::string key = item.fullname();
    if (key == "config") return InvalidArgument("serve: --config " + path + ": 'config' cannot nest");
    if (key == "check-config") {
      return InvalidArgument("serve: --config " + path + ": 'check-config' is a command-line action, not a setting");
    }
    CLI::Option* opt = nullptr;
    try {
      opt = cmd->get_option("--" + key);
    } catch (const CLI::OptionNotFound&) {
      return InvalidArgument("serve: --config " + path + ": unknown setting '" + key + "'");
    }
    if (opt->count() > 0) continue;  // the command line wins
    try {
      opt->add_result(item.inputs);
      opt->run_callback();
    } catch (const CLI::Error& e) {
      return InvalidArgument("serve: --config " + path + ": '" + key + "': " + e.what());
    }
  }
  return Status::Ok();
}

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

void AddEnvApiKey(ServeFlags& f) {
  if (const char* key = std::getenv("TESSERA_API_KEY"); key != nullptr && *key != '\0') f.api_keys.push_back(key);
}

// `--check-config[=flags]`: the checks RunServe makes before binding (all
// scopes), plus the host, port file, device and model metadata (full scope),
// then exit 0 (report on stdout) or 1 (the error, naming the flag, on stderr).
int CheckConfig(ServeFlags f, const std::string& scope) {
  AddEnvApiKey(f);
  StatusOr<std::optional<SpeculativeConfig>> speculative = ValidateServeFlags(f);
  if (!speculative.ok()) return Fail(speculative.status());
  std::vector<std::string> facts = {"flags and config values are valid"};
  if (scope == "full") {
    StatusOr<std::vector<std::string>> env = CheckServeEnvironment(f, *speculative);
    if (!env.ok()) return Fail(env.status());
    facts.insert(facts.end(), env->begin(), env->end());
  }
  std::printf("serve --check-config=%s: OK\n", scope.c_str());
  for (const std::string& line : facts) std::printf("  %s\n", line.c_str());
  return 0;
}

int RunServe(ServeFlags f) {
  AddEnvApiKey(f);
  StatusOr<std::optional<SpeculativeConfig>> checked = ValidateServeFlags(f);
  if (!checked.ok()) return Fail(checked.status());
  if (f.role == "router") {
    RouterServeOptions ro;
    ro.host = f.host;
    ro.port = f.port;
    ro.port_file = f.port_file;
    ro.api_keys = f.api_keys;
    ro.max_body_bytes = f.max_body_bytes;
    ro.idle_timeout_s = f.idle_timeout_s;
    ro.drain_timeout_s = f.drain_timeout_s;
    ro.grpc_port = f.grpc_port;
    ro.flags = f.router;
    return RunRouter(ro);
  }
  const std::optional<SpeculativeConfig> speculative = *checked;
  const parallel::GroupOptions group = GroupFromFlags(f);
  if (StatusOr<bool> worker = parallel::IsWorkerProcess(group); !worker.ok()) {
    return Fail(worker.status());
  } else if (*worker) {
    // A rank of a multi-process group other than 0: no API, runs the leader's plans.
    if (f.model.empty()) return Fail(InvalidArgument("serve: worker ranks (--node-rank > 0) need --model"));
    Status s = parallel::RunWorkerProcess(group, f.model, f.threads);
    if (!s.ok()) return Fail(s);
    spdlog::info("serve: worker rank stopped by the leader");
    return 0;
  }
  if (f.device == "cuda" && !HaveBackend("cuda")) {
    return Fail(FailedPrecondition("serve: --device cuda: this tessera was built without CUDA; use --device cpu"));
  }
  // Where the model is (or will be) and what clients call it, known up front.
  // KV events: the publisher binds now (a taken port fails the start) and
  // outlives the engine (the scheduler holds a reference).
  std::shared_ptr<kv_events::KvEventPublisher> kv_event_publisher;
  if (!f.kv_events_config.empty()) {
    auto kc = kv_events::ParseKvEventsConfig(f.kv_events_config);
    if (!kc.ok()) return Fail(kc.status());
    if (kc->enabled()) {
      kv_events::KvEventPublisherOptions po;
      po.config = *kc;
      po.medium = f.device == "cuda" ? "GPU" : "CPU";
      auto p = kv_events::KvEventPublisher::Start(po);
      if (!p.ok()) return Fail(p.status());
      kv_event_publisher = std::move(*p);
    }
  }
  const bool use_default = f.model.empty();
  std::string planned_dir = f.model;
  if (use_default) {
    StatusOr<std::string> dir = DefaultModelDir(f.default_model_size);
    if (!dir.ok()) return Fail(dir.status());
    planned_dir = *dir;
    spdlog::warn("serve: no --model given, serving the built-in default model: a synthetic qwen3 {} checkpoint "
                 "with RANDOM weights ({}); its outputs are meaningless. Pass --model DIR to serve a real "
                 "HF checkpoint.",
                 f.default_model_size, planned_dir);
  } else if (!fs::is_directory(f.model) && !fs::is_regular_file(f.model)) {
    return Fail(NotFound("serve: --model " + f.model + " is not a directory or a .gguf file"));
  }
  std::string served = f.served_model_name;
  if (served.empty()) {
    fs::path p = fs::absolute(planned_dir).lexically_normal();
    if (!p.has_filename()) p = p.parent_path();  // "dir/" names "dir"
    served = p.filename().string();
  }
  if (served.empty()) served = "default";

  net::io_context ioc{kIoThreads};
  net::io_context workers{kWorkerThreads};
  auto workers_guard = net::make_work_guard(workers);
  HttpServerOptions http_options;
  http_options.host = f.host;
  http_options.port = f.port;
  http_options.body_limit = f.max_body_bytes;
  http_options.idle_timeout = std::chrono::seconds(f.idle_timeout_s);
  http_options.api_keys = f.api_keys;
  HttpServer server(ioc, http_options);
  ServingMetrics metrics(served);

  ServeContext ctx;
  ctx.server = &server;
  ctx.metrics = &metrics;
  ctx.ioc = &ioc;
  ctx.workers = &workers;
  ctx.served_model_name = served;
  ctx.request_timeout = std::chrono::seconds(f.request_timeout_s);
  ctx.role = f.role;
  if (kv_event_publisher) {
    const kv_events::KvEventsConfig kc = *kv_events::ParseKvEventsConfig(f.kv_events_config);
    if (kv_events::PublisherBinds(kc.endpoint)) {
      // /server_info tells routers where to subscribe.
      ctx.kv_events_endpoint = kv_event_publisher->endpoint();
      ctx.kv_events_replay_endpoint = kv_event_publisher->replay_endpoint();
      ctx.kv_events_topic = kc.topic;
    } else {
      spdlog::warn("serve: --kv-events-config endpoint {} has no wildcard host, so the publisher connects to it "
                   "(vLLM's rule) and a router cannot subscribe; for `--routing-logic kv-aware` use tcp://*:PORT",
                   kc.endpoint);
    }
    ctx.extra_metrics = [p = kv_event_publisher.get()] {
      const kv_events::KvEventPublisherStats st = p->stats();
      return fmt::format(
          "# HELP tessera:kv_events_published_total KV cache events published (BlockStored, BlockRemoved, "
          "AllBlocksCleared).\n# TYPE tessera:kv_events_published_total counter\n"
          "tessera:kv_events_published_total {}\n"
          "# HELP tessera:kv_event_batches_published_total KV event batches published.\n"
          "# TYPE tessera:kv_event_batches_published_total counter\ntessera:kv_event_batches_published_total {}\n"
          "# HELP tessera:kv_events_dropped_total KV events lost to a full publisher queue.\n"
          "# TYPE tessera:kv_events_dropped_total counter\ntessera:kv_events_dropped_total {}\n"
          "# HELP tessera:kv_event_replays_served_total KV event replay requests answered.\n"
          "# TYPE tessera:kv_event_replays_served_total counter\ntessera:kv_event_replays_served_total {}\n",
          st.events_published, st.batches_published, st.events_dropped, st.replays_served);
    };
  }
  RegisterOpenAiRoutes(&ctx);
  Shutdown shutdown(ioc, server, ctx, std::chrono::seconds(f.drain_timeout_s));

  if (Status s = server.Listen(); !s.ok()) return Fail(s);
  const std::string url = "http://" + server.address() + ":" + std::to_string(server.port());
  std::unique_ptr<GrpcServer> grpc;
  if (f.grpc_port >= 0) {
    GrpcServerOptions go;
    go.host = f.host;
    go.port = f.grpc_port;
    go.api_keys = f.api_keys;
    go.max_receive_message_bytes = static_cast<int>(std::min<uint64_t>(f.max_body_bytes, 1u << 30));
    StatusOr<std::unique_ptr<GrpcServer>> g = GrpcServer::Start(go, [&ctx] { return ctx.ready_engine(); });
    if (!g.ok()) return Fail(g.status());
    grpc = std::move(*g);
    shutdown.on_drain = [&grpc] { grpc->BeginDrain(); };
  }
  const int grpc_port = grpc ? grpc->port() : -1;
  ctx.grpc_port.store(grpc_port);  // a router reads it on /ready (decode and unified pools)
  if (Status s = WritePortFile(f.port_file, server.port(), grpc_port); !s.ok()) return Fail(s);
  spdlog::info("serve: HTTP on {}, gRPC on {} (model '{}' loading; /health and /ready answer now){}", url,
               grpc ? f.host + ":" + std::to_string(grpc_port) : std::string("off"), served,
               f.api_keys.empty() ? "" : "; API key required");
  server.Start();

  net::signal_set signals(ioc, SIGINT, SIGTERM);
  std::function<void(boost::system::error_code, int)> on_signal = [&](boost::system::error_code ec, int sig) {
    if (ec) return;
    if (ctx.draining.load()) {
      spdlog::warn("serve: second signal {}, exiting now", sig);
      spdlog::default_logger()->flush();
      std::_Exit(1);
    }
    spdlog::info("serve: received signal {}", sig);
    shutdown.Begin(0);
    signals.async_wait(on_signal);
  };
  signals.async_wait(on_signal);

  // The model loads off the io threads, so probes answer meanwhile.
  std::unique_ptr<ServingEngine> engine;
  std::thread loader([&] {
    StatusOr<std::string> dir = use_default ? EnsureDefaultModel(f.default_model_size)
                                            : StatusOr<std::string>(planned_dir);
    if (dir.ok() && IsSyntheticCheckpoint(*dir)) {
      spdlog::warn("serve: {} is a synthetic checkpoint with random weights; completions are meaningless", *dir);
    }
    StatusOr<std::unique_ptr<ServingEngine>> e = dir.status();
    if (dir.ok()) {
      ServingOptions o;
      o.loop.model_dir = *dir;
      o.loop.num_threads = f.threads;
      o.loop.kv_cache_bytes = f.kv_cache_mb << 20;
      o.loop.kv_cache_bytes_set = f.kv_cache_mb_set;
      o.loop.device = f.device;
      o.loop.cuda.gpu_memory_utilization = f.gpu_memory_utilization;
      o.loop.cuda.cuda_graphs = !f.enforce_eager;
      o.loop.cuda.deterministic = f.deterministic;
      o.loop.scheduler.kv.num_blocks = f.num_kv_blocks;
      o.loop.scheduler.kv.event_sink = kv_event_publisher;
      o.loop.scheduler.max_num_seqs = f.max_num_seqs;
      o.loop.scheduler.max_num_batched_tokens = std::max<int64_t>(f.max_num_batched_tokens, f.max_num_seqs);
      o.loop.max_step_ms = f.max_step_ms;
      o.loop.scheduler.max_waiting_seqs = f.max_pending_requests * 16;  // admission is bounded by max_in_flight
      o.loop.scheduler.limits.max_model_len = f.max_model_len;  // 0: the model's max_position_embeddings
      o.loop.speculative = speculative;
      o.loop.parallel = group;
      if (f.role == "prefill" || f.role == "decode" || f.kv_peer_fetch) {
        KvTransportOptions kt;
        kt.host = f.host;
        kt.port = f.kv_transfer_port;
        kt.ucx_tls = f.kv_ucx_tls;
        kt.pin_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.kv_pin_timeout_s * 1000));
        kt.fault = f.kv_transfer_fault;
        kt.pull_timeout = std::chrono::milliseconds(static_cast<int64_t>(f.kv_pull_timeout_s * 1000));
        o.loop.kv_transfer = kt;
      }
      if (f.kv_offload_host_gb > 0 || !f.kv_offload_disk_dir.empty() || !f.kv_offload_remote_url.empty()) {
        KvTierOptions t;
        t.host_bytes = static_cast<int64_t>(f.kv_offload_host_gb * 1e9);
        t.disk_dir = f.kv_offload_disk_dir;
        if (f.kv_offload_disk_gb > 0) t.disk_bytes = static_cast<int64_t>(f.kv_offload_disk_gb * 1e9);
        t.remote_url = f.kv_offload_remote_url;
        o.loop.kv_tiers = std::move(t);
      }
      o.served_model_name = served;
      o.max_in_flight = f.max_pending_requests;
      o.metrics = &metrics;
      e = ServingEngine::Create(std::move(o));
    }
    if (!e.ok()) {
      ctx.state.store(ModelState::kFailed);
      spdlog::error("serve: model failed to load: {}", e.status().ToString());
      shutdown.Begin(1);
      return;
    }
    engine = std::move(*e);
    if (const KvTransport* kt = engine->kv_transport()) {
      // The KV port is known only now; the file is rewritten with it.
      if (Status s = WritePortFile(f.port_file, server.port(), grpc ? grpc->port() : -1, kt->port()); !s.ok()) {
        spdlog::error("{}", s.ToString());
      }
      spdlog::info("serve: role {}: KV transfer on {}:{}", f.role, kt->host(), kt->port());
    }
    ctx.chat_output = ResolveChatOutput(f, engine->chat_template());
    spdlog::info("serve: chat output parsing: tool calls {}{}, reasoning {}",
                 ctx.chat_output.tool_parser == openai::tools::ToolParserKind::kNone
                     ? "off"
                     : std::string(openai::tools::ToolParserName(ctx.chat_output.tool_parser)),
                 f.tool_call_parser.empty() && ctx.chat_output.tool_parser != openai::tools::ToolParserKind::kNone
                     ? " (from the chat template)"
                     : "",
                 ctx.chat_output.reasoning_parser == openai::tools::ReasoningParserKind::kNone
                     ? "off"
                     : std::string(openai::tools::ReasoningParserName(ctx.chat_output.reasoning_parser)));
    ctx.engine.store(engine.get(), std::memory_order_release);
    if (ctx.draining.load()) engine->BeginDrain();
    ctx.state.store(ModelState::kReady, std::memory_order_release);
    spdlog::info("serve: ready: model '{}' (max model length {}, KV cache {:.0f} MiB) at {}", served,
                 engine->limits().max_model_len, engine->kv_cache_bytes() / 1048576.0, url);
  });

  std::vector<std::thread> io_threads;
  std::vector<std::thread> worker_threads;
  for (int i = 0; i < kWorkerThreads; ++i) {
    worker_threads.emplace_back([&workers] {
      // Linux: PRIO_PROCESS with a thread id renices that thread only.
      if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kWorkerNice) != 0) {
        spdlog::debug("serve: could not lower a front-end worker's priority");
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

  if (ctx.state.load() == ModelState::kLoading) {
    // Model::Load and synthesis cannot be interrupted; a partial default model
    // lives in a temporary directory that the next run removes.
    spdlog::warn("serve: interrupted while loading the model; exiting");
    spdlog::default_logger()->flush();
    std::_Exit(shutdown.exit_code());
  }
  loader.join();
  if (grpc) grpc->Shutdown(std::chrono::milliseconds(1000));  // cancels streams that outlived the drain
  if (engine) engine->Stop();  // aborts whatever outlived the drain
  spdlog::info("serve: stopped");
  return shutdown.exit_code();
}

}  // namespace

void AddServeCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API and gRPC");
  auto f = std::make_shared<ServeFlags>();
  auto config = std::make_shared<std::string>();
  cmd->add_option("--config", *config,
                  "TOML file with the same settings: long option names as keys (e.g. max-num-seqs = 32); "
                  "command-line flags win")
      ->check(CLI::ExistingFile);
  cmd->add_option("--model", f->model,
                  "HF checkpoint directory or .gguf file (default: a built-in synthetic model with random weights)");
  cmd->add_option("--served-model-name", f->served_model_name,
                  "model id in the API (default: the model directory's name)");
  cmd->add_option("--host", f->host, "address to listen on (HTTP and gRPC)")->capture_default_str();
  cmd->add_option("--port", f->port, "HTTP port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--grpc-port", f->grpc_port, "gRPC port (0: any free port, -1: no gRPC)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 65535));
  cmd->add_option("--port-file", f->port_file, "write {\"http\": N, \"grpc\": M} here once the ports are bound");
  cmd->add_option("--api-key", f->api_keys,
                  "require 'Authorization: Bearer KEY' (repeatable; also $TESSERA_API_KEY); /health, /ready and "
                  "/metrics stay open");
  cmd->add_option("--threads", f->threads, "CPU threads for the engine (0 = all)")->capture_default_str();
  cmd->add_option("--max-model-len", f->max_model_len,
                  "max tokens per sequence, prompt + completion (0: the model's max_position_embeddings)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  CLI::Option* kv_mb = cmd->add_option("--kv-cache-mb", f->kv_cache_mb,
                                       "KV cache size in MiB (on a GPU: instead of --gpu-memory-utilization)")
                           ->capture_default_str()
                           ->check(CLI::PositiveNumber);
  cmd->add_option("--device", f->device, "cpu or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--gpu-memory-utilization", f->gpu_memory_utilization,
                  "fraction of GPU memory for weights, activations and the KV pool")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 1.0));
  cmd->add_flag("--enforce-eager", f->enforce_eager, "CUDA: no graphs for decode steps");
  cmd->add_flag("--deterministic", f->deterministic,
                "CUDA: batch-invariant kernels (a sequence's logits do not depend on its batch; slower)");
  cmd->add_option("--num-kv-blocks", f->num_kv_blocks, "KV cache blocks of 16 tokens (overrides --kv-cache-mb)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-num-seqs", f->max_num_seqs, "sequences per engine step")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--max-num-batched-tokens", f->max_num_batched_tokens, "tokens per engine step (prefill chunk)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{16}, int64_t{1} << 20));
  cmd->add_option("--speculative-config", f->speculative_config,
                  "speculative decoding, JSON with vLLM's fields, e.g. '{\"method\": \"ngram\", "
                  "\"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4}' or '{\"method\": \"draft_model\", "
                  "\"model\": \"DIR\", \"num_speculative_tokens\": 4}'");
  cmd->add_option("--kv-events-config", f->kv_events_config,
                  "publish KV cache events (vLLM's format: msgpack over ZeroMQ), JSON with vLLM's fields, e.g. "
                  "'{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"endpoint\": \"tcp://*:5557\", "
                  "\"replay_endpoint\": \"tcp://*:5558\", \"topic\": \"kv\"}'");
  cmd->add_option("--max-step-ms", f->max_step_ms,
                  "target duration of one engine step: prefill chunks are cut to fit it, so a cancelled request "
                  "frees the engine within about one step (0: bounded by --max-num-batched-tokens only)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 600000.0));
  cmd->add_option("--max-pending-requests", f->max_pending_requests,
                  "requests running or queued; beyond it new ones get 429 with Retry-After")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--request-timeout", f->request_timeout_s, "seconds a request may take (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--drain-timeout", f->drain_timeout_s, "seconds SIGTERM waits for in-flight requests")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-body-bytes", f->max_body_bytes, "larger request bodies get 413")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 30));
  cmd->add_option("--idle-timeout", f->idle_timeout_s, "seconds an idle or slow-sending connection is kept")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--tensor-parallel-size", f->tensor_parallel_size,
                  "ranks splitting attention heads, FFN columns and the vocabulary (also -tp); CPU ranks are "
                  "threads of this process, or one process per rank with --nnodes")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--data-parallel-size", f->data_parallel_size,
                  "with --enable-expert-parallel: ranks each running attention for their share of the "
                  "sequences, experts spread over all of them (also -dp)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_flag("--enable-expert-parallel", f->enable_expert_parallel,
                "MoE models: place the routed experts on the ranks and move tokens to them with all-to-all");
  cmd->add_option("--num-redundant-experts", f->num_redundant_experts,
                  "expert parallelism: extra expert slots per MoE layer holding replicas of hot experts; a "
                  "replicated expert's tokens go to its least-loaded replica (experts + this must be a multiple "
                  "of the ranks)")
      ->check(CLI::Range(0, 4096));
  cmd->add_flag("--enable-eplb", f->enable_eplb,
                "expert parallelism: rebalance the experts (and their replicas) over the ranks from the "
                "measured load every step_interval steps (vLLM's EPLB)");
  cmd->add_option("--eplb-config", f->eplb_config,
                  "JSON: window_size (steps of load used, default 1000), step_interval (steps between "
                  "rebalances, default 3000), num_redundant_experts, log_balancedness");
  cmd->add_option("--nnodes", f->nnodes,
                  "processes in the group, one rank each, joined over Gloo/TCP (default: $LWS_GROUP_SIZE or 1)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--node-rank", f->node_rank,
                  "this process in the group; 0 serves the API, others only compute (default: "
                  "$LWS_WORKER_INDEX or 0)")
      ->check(CLI::Range(0, 63));
  cmd->add_option("--leader-addr", f->leader_addr,
                  "host[:port] of rank 0's rendezvous store (default: $LWS_LEADER_ADDRESS, port 29500)");
  cmd->add_option("--parallel-timeout", f->parallel_timeout_s,
                  "seconds a rank may be missing or silent before the group fails (startup join and every "
                  "collective)")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 3600.0));
  cmd->add_option("--role", f->role,
                  "unified: one instance does everything; prefill / decode: an engine with a KV transfer agent "
                  "(disaggregation); router: a front with no model that sends prompts to prefill instances and "
                  "streams from decode instances")
      ->capture_default_str()
      ->check(CLI::IsMember({"unified", "prefill", "decode", "router"}));
  cmd->add_option("--kv-transfer-port", f->kv_transfer_port,
                  "prefill/decode: port of the KV transfer control plane (gRPC; 0: any free port, written to "
                  "--port-file as \"kv_transfer\")")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--kv-ucx-tls", f->kv_ucx_tls,
                  "prefill/decode: UCX transports for KV bytes, as UCX_TLS (e.g. sm,self on one host; tcp,self "
                  "across hosts; default: UCX's choice)");
  cmd->add_option("--kv-pin-timeout", f->kv_pin_timeout_s,
                  "prefill: seconds exported KV blocks stay pinned waiting for a decode instance to pull them")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 86400.0));
  cmd->add_option("--kv-pull-timeout", f->kv_pull_timeout_s,
                  "decode: seconds one KV pull may take (handshake to ack) before the prompt is computed here "
                  "instead; other requests keep running meanwhile (the pull has its own thread)")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 600.0));
  cmd->add_flag("--kv-peer-fetch", f->kv_peer_fetch,
                "unified: run the KV transfer agent too, so a KV-aware router (--routing-logic kv-aware) can have "
                "this instance pull a prompt prefix that a peer instance holds instead of computing it, and "
                "export its own prefixes to peers");
  cmd->add_option("--kv-transfer-fault", f->kv_transfer_fault, "fault injection for tests: corrupt | drop")
      ->group("");
  cmd->add_option("--kv-offload-host-gb", f->kv_offload_host_gb,
                  "KV tier in host DRAM below the KV pool, in GB (LRU): computed prompt blocks are copied there "
                  "and loaded back on a later prefix hit instead of recomputed (0: off)");
  cmd->add_option("--kv-offload-disk-dir", f->kv_offload_disk_dir,
                  "KV tier on local disk (one checked file per block; kept across restarts of the instance)");
  cmd->add_option("--kv-offload-disk-gb", f->kv_offload_disk_gb,
                  "bound of the disk KV tier in GB, LRU eviction (default 10)");
  cmd->add_option("--kv-offload-remote-url", f->kv_offload_remote_url,
                  "shared KV tier on Redis/Valkey: redis://HOST:PORT[/DB] (keys: model fingerprint + layout + "
                  "block hash + tenant digest; an unreachable server means recompute, never a failed request)");
  AddRouterFlags(cmd, &f->router);
  cmd->add_option("--tool-call-parser", f->tool_call_parser,
                  "how tool calls are parsed out of chat output when a request has tools (tool_choice auto): "
                  "hermes (Qwen2.5/Qwen3 <tool_call>), llama3_json, mistral; default: the format the model's chat "
                  "template teaches, else none")
      ->check(CLI::IsMember({"hermes", "llama3_json", "mistral"}));
  cmd->add_option("--reasoning-parser", f->reasoning_parser,
                  "split <think>...</think> off chat output into reasoning_content: qwen3, deepseek_r1 "
                  "(default: off)")
      ->check(CLI::IsMember({"qwen3", "deepseek_r1"}));
  cmd->add_flag("--enable-auto-tool-choice", f->enable_auto_tool_choice,
                "accepted for vLLM command lines: tool_choice \"auto\" is always on when a tool-call parser is "
                "known");
  auto check_scope = std::make_shared<std::string>();
  CLI::Option* check = cmd->add_option("--check-config", *check_scope,
                  "validate every flag and the --config file, then exit 0 (valid) or 1 (the error names the flag) "
                  "without binding or loading; 'full' (the default) also resolves --host and reads the model's "
                  "metadata, 'flags' checks values only (for a machine without the model)")
      ->expected(0, 1)
      ->check(CLI::IsMember({"full", "flags"}));
  cmd->add_option("--default-model-size", f->default_model_size, "size of the built-in default model")
      ->check(CLI::IsMember({"tiny", "0.5b"}))
      ->group("");  // hidden: for tests
  cmd->callback([cmd, f, config, exit_code, kv_mb, check, check_scope] {
    if (!config->empty()) {
      if (Status s = ApplyConfigFile(cmd, *config); !s.ok()) {
        *exit_code = Fail(s);
        return;
      }
    }
    f->kv_cache_mb_set = kv_mb->count() > 0;
    if (check->count() > 0) {
      *exit_code = CheckConfig(*f, check_scope->empty() ? "full" : *check_scope);
      return;
    }
    *exit_code = RunServe(*f);
  });
}

}  // namespace tessera
