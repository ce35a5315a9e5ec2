// `tessera calibrate`: fits the twin's cost model (runtime/sim/cost_model.h;
// docs/architecture.md, "Twin") on this machine. It builds the engine loop
// exactly as `serve` does from the same flags (and --config file), runs a
// designed set of step compositions through it — prefill chunks of several
// sizes at several contexts (a cached prefix puts a chunk at a context),
// decode batches of several sizes at several context lengths, and mixed
// steps (a prefill arriving while a batch decodes) — each several times,
// records every step's composition and measured time through the loop's
// on_step seam (the same numbers the server's step metrics and time-bounded
// steps see), fits the linear model (runtime/sim/fit.h) and writes the JSON
// that `simulate --cost-model` and `serve --cost-model` read, with where and
// how it was measured. With --hardware (a device not at hand) nothing is run:
// the same file is derived from the model's shape and the device's published
// figures (runtime/sim/hardware.h), its "calibration.source" "derived".
//
// Steps are bounded by --max-num-batched-tokens only (time-bounded steps
// would cut the designed chunks). Cost: the compositions' prompt tokens, about
// 13k per repeat at the full grid (fewer when the KV pool, the context length
// or --max-num-seqs cut it), so about a minute a repeat at 200 tok/s of prefill.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/log.h"
#include "cli/default_model.h"
#include "cli/hardware_flags.h"
#include "cli/serve_flags.h"
#include "cli/serve_options.h"
#include "runtime/engine_loop.h"
#include "runtime/sim/fit.h"

namespace tessera {
namespace {

struct CalibrateFlags {
  std::string config;
  std::string out;
  int repeats = 3;
  // Sampling is part of a step's time (a full softmax over the vocabulary per
  // sampled row at temperature > 0, an argmax at 0): calibrate as the
  // workload samples. 0: tessera-bench's default.
  double temperature = 0;
  HardwareFlags hardware;  // given: derive from published figures instead of measuring
};

// One request of a composition: submitted before the composition's step `at`.
struct Submission {
  int at = 0;
  int64_t prompt_len = 0;
  int64_t max_tokens = 1;
  const std::vector<int32_t>* prefix = nullptr;  // leading tokens shared with an earlier request; not owned
};

struct Composition {
  std::string name;
  std::vector<Submission> requests;
};

// Runs compositions on one engine loop through its Step(), recording each
// step's shape and time while `recording`.
class Runner {
 public:
  Runner(std::unique_ptr<EngineLoop> loop, bool* recording, double temperature)
      : loop_(std::move(loop)), recording_(recording), temperature_(temperature) {
    vocab_ = std::max<int64_t>(loop_->scheduler_options().limits.vocab_size, 64);
  }
  EngineLoop& loop() { return *loop_; }

  std::vector<int32_t> Tokens(int64_t n) {
    std::uniform_int_distribution<int32_t> d(3, static_cast<int32_t>(std::min<int64_t>(vocab_, 32000) - 1));
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (int32_t& v : t) v = d(rng_);
    return t;
  }

  // Fresh tokens after each request's prefix, so only the prefixes are cached.
  Status Run(const Composition& c, bool record) {
    *recording_ = record;
    std::vector<RequestStreamPtr> streams;
    size_t next = 0;
    for (int step = 0; step < 100000; ++step) {
      for (; next < c.requests.size() && c.requests[next].at <= step; ++next) {
        const Submission& s = c.requests[next];
        Request r;
        r.id = fmt::format("calibrate-{}", ids_++);
        if (s.prefix) r.prompt_token_ids = *s.prefix;
        const std::vector<int32_t> rest = Tokens(s.prompt_len - static_cast<int64_t>(r.prompt_token_ids.size()));
        r.prompt_token_ids.insert(r.prompt_token_ids.end(), rest.begin(), rest.end());
        r.params.max_tokens = static_cast<int32_t>(s.max_tokens);
        r.params.ignore_eos = true;
        r.params.temperature = static_cast<float>(temperature_);
        ASSIGN_OR_RETURN(RequestStreamPtr stream, loop_->Submit(std::move(r)));
        streams.push_back(std::move(stream));
      }
      bool done = next == c.requests.size();
      for (const RequestStreamPtr& s : streams) done = done && s->finished();
      if (done) return Status::Ok();
      RETURN_IF_ERROR(loop_->Step());
    }
    return Internal("calibrate: composition " + c.name + " did not finish");
  }

 private:
  std::unique_ptr<EngineLoop> loop_;
  bool* recording_;  // read by the loop's on_step
  double temperature_;
  int64_t vocab_ = 64;
  int64_t ids_ = 0;
  std::mt19937 rng_{20261128};
};

// The designed compositions for this loop's limits. `prefixes` holds the
// shared prefixes the prefill-at-context compositions point into.
std::vector<Composition> Design(const SchedulerOptions& so, std::deque<std::vector<int32_t>>* prefixes,
                                Runner* runner) {
  const int64_t kv_tokens = int64_t{so.kv.num_blocks} * so.kv.block_size;
  // A composition's prompts stay within the model's length and well within
  // the pool, so nothing is preempted (a preemption's recompute would be a
  // prefill the design did not ask for; it is still measured truly).
  const int64_t max_len = std::min<int64_t>(so.limits.max_model_len, kv_tokens / 2) - 8;
  const int64_t max_seqs = so.max_num_seqs;
  std::vector<Composition> out;
  // Prefill chunks of P tokens at context C: request 1 computes (and caches)
  // a C-token prefix, request 2 = that prefix + P fresh tokens.
  const int64_t chunks[] = {16, 64, 256, 512};
  for (int64_t ctx : {int64_t{0}, int64_t{256}, int64_t{1024}}) {
    if (ctx + 16 > max_len) continue;
    const std::vector<int32_t>* prefix = nullptr;
    if (ctx > 0) {
      prefixes->push_back(runner->Tokens(ctx));
      prefix = &prefixes->back();
    }
    Composition c{fmt::format("prefill at context {}", ctx), {}};
    if (prefix) c.requests.push_back({0, ctx, 1, prefix});
    int at = 1;
    for (int64_t p : chunks) {
      if (ctx + p <= max_len) c.requests.push_back({at++, ctx + p, 1, prefix});
    }
    out.push_back(std::move(c));
  }
  // Decode batches of b sequences at context ~C (b prompts of C tokens, then
  // 4 decode steps); b*C bounded so the prefill stays a small part of the run.
  for (int64_t ctx : {int64_t{64}, int64_t{512}, int64_t{2048}}) {
    for (int64_t b : {int64_t{1}, int64_t{4}, int64_t{16}, int64_t{32}}) {
      if (b > max_seqs || ctx > max_len || b * (ctx + 8) > kv_tokens / 2 || b * ctx > 4096) continue;
      Composition c{fmt::format("decode batch {} at context {}", b, ctx), {}};
      for (int64_t i = 0; i < b; ++i) c.requests.push_back({0, ctx, 5, nullptr});
      out.push_back(std::move(c));
    }
  }
  // Mixed: a prompt of P tokens arriving while b sequences decode (short
  // contexts: the decode batches above cover context; this keeps the batch's
  // own prefill cheap on a large model).
  const int64_t mixed_ctx = 32;
  for (int64_t b : {int64_t{4}, int64_t{16}}) {
    for (int64_t p : {int64_t{64}, int64_t{256}}) {
      if (b + 1 > max_seqs || mixed_ctx + p > max_len || b * (mixed_ctx + 8) + p > kv_tokens / 2) continue;
      Composition c{fmt::format("mixed: {} decodes and a {}-token prompt", b, p), {}};
      for (int64_t i = 0; i < b; ++i) c.requests.push_back({0, mixed_ctx, 6, nullptr});
      // The batch's prompts take ceil(b*mixed_ctx / max_num_batched_tokens) steps.
      const int prefill_steps =
          static_cast<int>((b * mixed_ctx + so.max_num_batched_tokens - 1) / so.max_num_batched_tokens);
      c.requests.push_back({prefill_steps + 1, p, 2, nullptr});
      out.push_back(std::move(c));
    }
  }
  return out;
}

// Refuses the settings a single-engine, single-rank cost model does not describe.
Status CheckCalibratable(const ServeFlags& f) {
  auto refuse = [](const std::string& what, const std::string& why) {
    return InvalidArgument("calibrate: " + what + ": " + why);
  };
  if (f.role != "unified") return refuse("--role " + f.role, "calibrate measures one unified engine");
  if (!f.speculative_config.empty()) return refuse("--speculative-config", "the twin does not model drafts yet");
  if (f.kv_offload_host_gb > 0 || !f.kv_offload_disk_dir.empty() || !f.kv_offload_remote_url.empty()) {
    return refuse("--kv-offload-*", "the twin does not model KV tiers yet");
  }
  if (f.tensor_parallel_size > 1 || f.data_parallel_size > 1) return refuse("-tp/-dp > 1", "not modelled yet");
  if (!f.cost_model.empty()) return refuse("--cost-model", "calibrate writes a cost model (--out), it reads none");
  if (f.ttft_slo_ms > 0) return refuse("--ttft-slo-ms", "calibrate runs no admission queue");
  return Status::Ok();
}

std::string CpuName() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(std::min(colon + 2, line.size()));
    }
  }
  return "unknown";
}

nlohmann::ordered_json Provenance(const ServeFlags& sf, const EngineLoopOptions& lo, EngineLoop& loop,
                                  const sim::CostFit& fit, int repeats, double temperature, double wall_s) {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = 0;
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", &tm);
  const ModelConfig& mc = loop.model_config();
  const SchedulerOptions& so = loop.scheduler_options();
  nlohmann::ordered_json points = nlohmann::ordered_json::array();
  for (const sim::FitPoint& p : fit.points) {
    points.push_back({{"num_prefill_seqs", p.shape.num_prefill_seqs},
                      {"prefill_tokens", p.shape.prefill_tokens},
                      {"prefill_attention", p.shape.prefill_attention},
                      {"num_decode_seqs", p.shape.num_decode_seqs},
                      {"decode_tokens", p.shape.decode_tokens},
                      {"decode_context", p.shape.decode_context},
                      {"samples", p.samples},
                      {"measured_ms", p.measured_ms},
                      {"predicted_ms", p.predicted_ms},
                      {"relative_error", p.relative_error}});
  }
  return {{"tool", std::string("tessera calibrate ") + kTesseraVersion},
          {"date", date},
          {"machine",
           {{"hostname", host},
            {"cpu", CpuName()},
            {"hardware_threads", std::thread::hardware_concurrency()},
            {"device", lo.device},
            {"num_threads", lo.num_threads}}},
          {"model",
           {{"path", sf.model},
            {"architecture", mc.architecture},
            {"num_layers", mc.num_layers},
            {"hidden_size", mc.hidden_size},
            {"intermediate_size", mc.intermediate_size},
            {"num_attention_heads", mc.num_q_heads},
            {"num_key_value_heads", mc.num_kv_heads},
            {"head_dim", mc.head_dim},
            {"vocab_size", mc.vocab_size},
            {"num_experts", mc.moe.num_experts},
            {"num_experts_per_tok", mc.moe.top_k}}},
          {"scheduler",
           {{"max_num_seqs", so.max_num_seqs},
            {"max_num_batched_tokens", so.max_num_batched_tokens},
            {"block_size", so.kv.block_size},
            {"num_kv_blocks", so.kv.num_blocks}}},
          {"fit",
           {{"objective", "least squares of the relative error, coefficients >= 0"},
            {"repeats", repeats},
            {"temperature", temperature},
            {"r2", fit.r2},
            {"mape", fit.mape},
            {"max_abs_relative_error", fit.max_abs_relative_error},
            {"undetermined", fit.undetermined},
            {"wall_s", wall_s},
            {"points", points}}}};
}

// The cost-model file to `path` (stdout when empty).
int Emit(const std::string& json, const std::string& path, const std::string& note) {
  if (path.empty()) {
    std::fputs(json.c_str(), stdout);
    return 0;
  }
  std::ofstream out(path, std::ios::binary);
  out << json;
  out.close();
  if (!out) return Fail(Status(StatusCode::kUnavailable, "calibrate: cannot write --out " + path));
  LogInfo("calibrate: wrote {}{}", path, note);
  return 0;
}

// --hardware: nothing is run; the coefficients come from the model's shape and
// the device's published figures (runtime/sim/hardware.h), marked derived.
int Derive(const ServeFlags& sf, const CalibrateFlags& f) {
  StatusOr<std::string> json = DerivedCostModelJson(sf, f.hardware);
  if (!json.ok()) return Fail(Status(json.status().code(), "calibrate: " + json.status().message()));
  return Emit(*json, f.out, " (derived from published figures, not measured)");
}

int Calibrate(const ServeFlags& sf, const CalibrateFlags& f) {
  if (f.hardware.given()) return Derive(sf, f);
  if (Status s = CheckCalibratable(sf); !s.ok()) return Fail(s);
  StatusOr<ServeOptions> serve = ServeOptionsFromFlags(sf);
  if (!serve.ok()) return Fail(serve.status());
  EngineLoopOptions lo = serve->serving.loop;
  StatusOr<std::string> dir = sf.model.empty() ? EnsureDefaultModel(sf.default_model_size)
                                               : StatusOr<std::string>(sf.model);
  if (!dir.ok()) return Fail(dir.status());
  lo.model_dir = *dir;
  lo.max_step_ms = 0;  // the designed chunks, not time-cut ones
  std::vector<sim::StepSample> samples;
  bool recording = false;
  lo.on_step = [&samples, &recording](const SchedulerOutput&, const sim::StepShape& shape, int64_t ns) {
    if (recording) samples.push_back({shape, ns});
  };
  const auto wall0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count(); };
  StatusOr<std::unique_ptr<EngineLoop>> loop = EngineLoop::Create(lo);
  if (!loop.ok()) return Fail(loop.status());
  Runner runner(std::move(*loop), &recording, f.temperature);
  std::deque<std::vector<int32_t>> prefixes;  // Submission::prefix points into it
  // Warm-up (untimed): the first steps run cold (allocations, page faults).
  if (Status s = runner.Run({"warm-up", {{0, 64, 4, nullptr}, {0, 32, 4, nullptr}}}, false); !s.ok()) return Fail(s);
  for (int rep = 0; rep < f.repeats; ++rep) {
    prefixes.clear();
    const std::vector<Composition> design = Design(runner.loop().scheduler_options(), &prefixes, &runner);
    for (size_t i = 0; i < design.size(); ++i) {
      std::fprintf(stderr, "\rcalibrate: repeat %d/%d, composition %zu/%zu (%s) %.1fs    ", rep + 1, f.repeats,
                   i + 1, design.size(), design[i].name.c_str(), elapsed());
      std::fflush(stderr);
      if (Status s = runner.Run(design[i], true); !s.ok()) return Fail(s);
    }
  }
  std::fprintf(stderr, "\n");
  StatusOr<sim::CostFit> fit = sim::FitLinearCostModel(samples);
  if (!fit.ok()) return Fail(fit.status());
  for (const std::string& key : fit->undetermined) {
    // Without drafts a decode's tokens are its count; anything else means the
    // limits (--max-num-seqs, the KV pool, the context length) left the
    // design too few kinds of step.
    if (key != "per_decode_token_ms") {
      return Fail(InvalidArgument("calibrate: the steps run could not determine '" + key +
                                  "'; raise --max-num-seqs, --max-model-len or the KV pool"));
    }
  }
  const double wall_s = elapsed();
  std::fprintf(stderr, "calibrate: %zu steps, %zu compositions, %.1fs; R^2 %.4f, MAPE %.1f%%, max |error| %.1f%%\n",
               samples.size(), fit->points.size(), wall_s, fit->r2, 100 * fit->mape,
               100 * fit->max_abs_relative_error);
  std::fprintf(stderr, "  %8s %10s %8s %10s %10s %10s %8s\n", "prefill", "attention", "decodes", "context",
               "measured", "predicted", "error");
  for (const sim::FitPoint& p : fit->points) {
    std::fprintf(stderr, "  %8lld %10lld %8lld %10lld %8.2fms %8.2fms %+7.1f%%\n",
                 static_cast<long long>(p.shape.prefill_tokens), static_cast<long long>(p.shape.prefill_attention),
                 static_cast<long long>(p.shape.num_decode_seqs), static_cast<long long>(p.shape.decode_context),
                 p.measured_ms, p.predicted_ms, 100 * p.relative_error);
  }
  const sim::LinearCostModel model(fit->coefficients);
  const std::string json =
      model.ToJson(Provenance(sf, lo, runner.loop(), *fit, f.repeats, f.temperature, wall_s).dump());
  return Emit(json, f.out, "");
}

}  // namespace

void AddCalibrateCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "calibrate",
      "Measure this machine's engine step times on a designed set of step compositions and fit the twin's cost "
      "model (JSON for simulate/serve --cost-model); takes serve's engine settings and --config file");
  auto sf = std::make_shared<ServeFlags>();
  auto f = std::make_shared<CalibrateFlags>();
  cmd->add_option("--config", f->config, "serve's TOML settings file (long option names as keys); flags win")
      ->check(CLI::ExistingFile);
  AddServeFlags(cmd, sf.get());
  cmd->add_option("--out", f->out, "write the cost model here (default: stdout)")->group("Calibration");
  cmd->add_option("--repeats", f->repeats, "runs of each step composition (their median is fitted)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100))
      ->group("Calibration");
  cmd->add_option("--temperature", f->temperature,
                  "sampling temperature of the runs (sampling is part of a step's time; 0 = greedy, as "
                  "tessera-bench's default)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 2.0))
      ->group("Calibration");
  AddHardwareFlags(cmd, &f->hardware);
  cmd->callback([cmd, sf, f, exit_code] {
    if (!f->config.empty()) {
      if (Status s = ApplyServeConfigFile(cmd, f->config); !s.ok()) {
        *exit_code = Fail(s);
        return;
      }
    }
    *exit_code = Calibrate(*sf, *f);
  });
}

}  // namespace tessera
