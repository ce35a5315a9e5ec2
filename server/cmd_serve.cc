// `tessera serve`: the OpenAI-compatible HTTP server.
//
// Startup order: bind the listener and answer /health and /ready at once, then
// load the model (synthesising the default one on first run) and warm up on the
// engine thread; /ready turns 200 when that is done. SIGINT/SIGTERM stop
// accepting, let in-flight requests finish, and exit 0.
#include <csignal>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/commands.h"
#include "server/default_model.h"
#include "server/http/engine_worker.h"
#include "server/http/http_server.h"
#include "server/http/openai_routes.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
namespace net = boost::asio;

constexpr int kIoThreads = 2;  // HTTP parsing/serialisation only; the engine has its own thread
constexpr auto kDrainTimeout = std::chrono::seconds(30);
constexpr auto kDrainPoll = std::chrono::milliseconds(20);

struct ServeFlags {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8000;
  int threads = 0;
  int64_t num_kv_blocks = 0;
  int64_t max_model_len = 0;
  std::string served_model_name;
  std::string default_model_size = "0.5b";
};

int Fail(const Status& s) {
  spdlog::error("{}", s.ToString());
  return 1;
}

// True when config.json says the checkpoint came from `tessera synth`.
bool IsSyntheticCheckpoint(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "config.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  return !j.is_discarded() && j.is_object() && j.contains("tessera_synthetic");
}

// Drives shutdown: drain, then stop the io_context. State lives on a strand
// (the io_context runs on several threads).
class Shutdown {
 public:
  Shutdown(net::io_context& ioc, HttpServer& server)
      : ioc_(ioc), server_(server), strand_(net::make_strand(ioc)), timer_(strand_) {}

  // Idempotent; thread-safe. A non-zero exit code sticks.
  void Begin(int exit_code) {
    net::post(strand_, [this, exit_code] {
      if (exit_code != 0) exit_code_ = exit_code;
      if (started_) return;
      started_ = true;
      spdlog::info("serve: shutting down: no new connections, finishing {} in-flight requests", server_.in_flight());
      server_.BeginDrain();
      deadline_ = std::chrono::steady_clock::now() + kDrainTimeout;
      Poll();
    });
  }
  // Read after the io_context has stopped.
  int exit_code() const { return exit_code_; }

 private:
  void Poll() {
    if (server_.in_flight() == 0) return ioc_.stop();
    if (std::chrono::steady_clock::now() > deadline_) {
      spdlog::warn("serve: {} requests still in flight after {}s; exiting anyway", server_.in_flight(),
                   kDrainTimeout.count());
      return ioc_.stop();
    }
    timer_.expires_after(kDrainPoll);
    timer_.async_wait([this](boost::system::error_code) { Poll(); });
  }

  net::io_context& ioc_;
  HttpServer& server_;
  net::strand<net::io_context::executor_type> strand_;
  net::steady_timer timer_;
  bool started_ = false;
  int exit_code_ = 0;
  std::chrono::steady_clock::time_point deadline_;
};

int RunServe(const ServeFlags& f) {
  // Where the model is (or will be) and what clients call it, known up front.
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
  } else if (!fs::is_directory(f.model)) {
    return Fail(NotFound("serve: --model " + f.model + " is not a directory"));
  }
  std::string served = f.served_model_name;
  if (served.empty()) {
    fs::path p = fs::absolute(planned_dir).lexically_normal();
    if (!p.has_filename()) p = p.parent_path();  // "dir/" names "dir"
    served = p.filename().string();
  }
  if (served.empty()) served = "default";

  net::io_context ioc{kIoThreads};
  HttpServerOptions http_options;
  http_options.host = f.host;
  http_options.port = f.port;
  HttpServer server(ioc, http_options);
  Shutdown shutdown(ioc, server);

  EngineOptions engine_options;
  engine_options.threads = f.threads;
  engine_options.num_kv_blocks = f.num_kv_blocks;
  engine_options.max_model_len = f.max_model_len;
  engine_options.resolve_model_dir = [use_default, size = f.default_model_size, planned_dir]() {
    return use_default ? EnsureDefaultModel(size) : StatusOr<std::string>(planned_dir);
  };
  EngineWorker engine(engine_options);

  ServeContext ctx;
  ctx.engine = &engine;
  ctx.server = &server;
  ctx.served_model_name = served;
  ctx.created = static_cast<int64_t>(std::time(nullptr));
  RegisterOpenAiRoutes(&ctx);

  if (Status s = server.Listen(); !s.ok()) return Fail(s);
  const std::string url = "http://" + server.address() + ":" + std::to_string(server.port());
  spdlog::info("serve: listening on {} (model '{}' loading; /health and /ready answer now)", url, served);
  server.Start();

  net::signal_set signals(ioc, SIGINT, SIGTERM);
  std::function<void(boost::system::error_code, int)> on_signal = [&](boost::system::error_code ec, int sig) {
    if (ec) return;
    if (server.draining()) {
      spdlog::warn("serve: second signal {}, exiting now", sig);
      spdlog::default_logger()->flush();
      std::_Exit(1);
    }
    spdlog::info("serve: received signal {}", sig);
    shutdown.Begin(0);
    signals.async_wait(on_signal);
  };
  signals.async_wait(on_signal);

  EngineWorker::Hooks hooks;
  hooks.before_ready = [&ctx, &served, url](const EngineInfo& info) -> Status {
    if (IsSyntheticCheckpoint(info.model_dir)) {
      spdlog::warn("serve: {} is a synthetic checkpoint with random weights; completions are meaningless",
                   info.model_dir);
    }
    const std::string tok = (fs::path(info.model_dir) / "tokenizer.json").string();
    StatusOr<ByteLevelDecoder> decoder = ByteLevelDecoder::Load(tok);
    if (decoder.ok()) {
      ctx.decoder = std::make_unique<ByteLevelDecoder>(std::move(*decoder));
    } else {
      spdlog::warn("serve: no text decoding ({}); completions carry token_ids and an empty 'text'",
                   decoder.status().ToString());
    }
    spdlog::info("serve: ready: model '{}' (max model length {}) at {}", served, info.max_model_len, url);
    return Status::Ok();
  };
  hooks.on_failed = [&shutdown](const Status& s) {
    spdlog::error("serve: model failed to load: {}", s.ToString());
    shutdown.Begin(1);
  };
  engine.Start(hooks);

  std::vector<std::thread> io_threads;
  for (int i = 0; i < kIoThreads; ++i) io_threads.emplace_back([&ioc] { ioc.run(); });
  for (auto& t : io_threads) t.join();
  server.MarkStopped();

  if (engine.state() == EngineState::kLoading) {
    // Model::Load and synthesis cannot be interrupted; a partial default model
    // lives in a temporary directory that the next run removes.
    spdlog::warn("serve: interrupted while loading the model; exiting");
    spdlog::default_logger()->flush();
    std::_Exit(shutdown.exit_code());
  }
  engine.Stop(/*abandon_queued=*/true);  // normally nothing is left after the drain
  spdlog::info("serve: stopped");
  return shutdown.exit_code();
}

}  // namespace

void AddServeCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  auto f = std::make_shared<ServeFlags>();
  cmd->add_option("--model", f->model,
                  "HF checkpoint directory (default: a built-in synthetic model with random weights)");
  cmd->add_option("--host", f->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", f->port, "port to listen on (0: any free port)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--threads", f->threads, "CPU threads for the engine (0 = all)")->capture_default_str();
  cmd->add_option("--num-kv-blocks", f->num_kv_blocks,
                  "KV cache blocks of 16 tokens (0: room for 8 max-length sequences, at most 2 GiB)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-model-len", f->max_model_len,
                  "max tokens per sequence, prompt + completion (0: the model's max_position_embeddings)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--served-model-name", f->served_model_name,
                  "model id in the API (default: the model directory's name)");
  cmd->add_option("--default-model-size", f->default_model_size, "size of the built-in default model")
      ->check(CLI::IsMember({"tiny", "0.5b"}))
      ->group("");  // hidden: for tests
  cmd->callback([f, exit_code] { *exit_code = RunServe(*f); });
}

}  // namespace tessera
