// `tessera simulate`: a workload through the twin (runtime/sim/twin.h; docs/
// architecture.md, "Twin") — the real scheduler and KV-cache manager on a
// virtual clock, the forward replaced by a cost model. It takes every setting
// of `tessera serve` (its flags and its --config file; the scheduling ones
// decide, the others — ports, keys, parsers — have nothing to act on) and
// tessera-bench's workload flags (its datasets, arrivals and metric names),
// and writes tessera-bench's JSON (and SVG) with the twin's figures beside them.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/tessera_bench/arrival.h"
#include "common/log.h"
#include "bench/tessera_bench/dataset.h"
#include "bench/tessera_bench/metrics.h"
#include "bench/tessera_bench/report.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/serve_flags.h"
#include "cli/serve_options.h"
#include "engine/gguf.h"
#include "engine/gguf_model.h"
#include "runtime/scheduler_limits.h"
#include "runtime/sim/twin.h"

namespace tessera {
namespace {

struct SimulateFlags {
  std::string config;
  std::string dataset = "random";
  std::string dataset_path;
  int64_t num_prompts = 100;
  int64_t input_len = 128, output_len = 32, prefix_len = 256, num_prefix_groups = 4;
  double range_ratio = 0;
  uint64_t seed = 0;
  std::string request_rate = "inf";
  double burstiness = 1.0;
  double time_scale = 1.0;
  std::vector<std::string> goodput;
  std::string result_json;
  std::string svg;
  bool per_request = false;
};

// Without a calibrated file: round figures of the order of the built-in 0.5b
// model on a laptop-class CPU. Not a measurement; `--cost-model FILE` gives one.
sim::LinearCoefficients DefaultCoefficients() {
  sim::LinearCoefficients c;
  c.base_ms = 5;
  c.per_prefill_token_ms = 0.5;
  c.per_decode_seq_ms = 2;
  c.per_decode_context_ms = 0.001;
  return c;
}

// The model's config (config.json, or a GGUF header), without its weights.
StatusOr<ModelConfig> ReadModelConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::string gguf, ResolveGgufPath(path));
  if (gguf.empty()) return LoadModelConfig(path);
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(gguf));
  return GgufModelConfig(file->contents(), gguf);
}

// Settings of serve that change what the scheduler does in ways the twin does
// not model yet: refused, naming the flag.
Status CheckModelled(const ServeFlags& f) {
  auto refuse = [](const std::string& what) {
    return InvalidArgument("simulate: " + what + " is not modelled by the twin yet");
  };
  if (f.role != "unified") return refuse("--role " + f.role);
  if (!f.speculative_config.empty()) return refuse("--speculative-config");
  if (f.kv_peer_fetch) return refuse("--kv-peer-fetch");
  if (f.kv_offload_host_gb > 0 || !f.kv_offload_disk_dir.empty() || !f.kv_offload_remote_url.empty()) {
    return refuse("--kv-offload-*");
  }
  if (f.tensor_parallel_size > 1 || f.data_parallel_size > 1) return refuse("-tp/-dp > 1");
  if (f.ttft_slo_ms > 0) return refuse("--ttft-slo-ms (SLO-aware admission)");
  if (f.device != "cpu" && f.num_kv_blocks <= 0 && !f.kv_cache_mb_set) {
    return InvalidArgument("simulate: --device " + f.device +
                           " sizes its KV pool by profiling the device; give --num-kv-blocks or --kv-cache-mb");
  }
  return Status::Ok();
}

// Scheduler options exactly as `serve` builds them, sized from the model's
// config as the engine loop does (runtime/scheduler_limits.h).
StatusOr<SchedulerOptions> SchedulerFromFlags(const ServeFlags& f, const EngineLoopOptions& loop) {
  SchedulerOptions so = loop.scheduler;
  std::string model = f.model;
  if (model.empty()) {
    ASSIGN_OR_RETURN(std::string dir, DefaultModelDir(f.default_model_size));
    if (std::filesystem::exists(dir)) model = dir;
  }
  if (model.empty()) {
    if (so.kv.num_blocks <= 0) {
      return InvalidArgument("simulate: --model (its config sizes the KV pool) or --num-kv-blocks is needed "
                             "(the built-in model has not been made yet)");
    }
    if (so.limits.max_model_len <= 0) so.limits.max_model_len = int64_t{so.kv.num_blocks} * so.kv.block_size;
    return so;
  }
  StatusOr<ModelConfig> mc = ReadModelConfig(model);
  if (!mc.ok()) return InvalidArgument("simulate: --model " + model + ": " + mc.status().message());
  const bool auto_len = ApplyModelLimits(*mc, &so);
  if (so.kv.num_blocks <= 0) {
    // The CPU pool is f32, a GPU's bf16 (engine/backend.h, kv_dtype).
    const int64_t per_token = mc->KvBytesPerToken(f.device == "cpu" ? 4 : 2);
    ASSIGN_OR_RETURN(so.kv.num_blocks, NumBlocksForBudget(loop.kv_cache_bytes, per_token, so.kv.block_size));
  }
  CapModelLenAtKvCache(auto_len, &so);
  return so;
}

StatusOr<double> ParseRate(const std::string& text) {
  if (text == "inf") return std::numeric_limits<double>::infinity();
  char* end = nullptr;
  const double r = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(r > 0) || std::isinf(r)) {
    return InvalidArgument("simulate: --request-rate: '" + text + "' is not a positive number or 'inf'");
  }
  return r;
}

// The workload as tessera-bench builds it, with each word of its text one
// token id (without a tokenizer tessera-bench's prompts are words of ~1 token
// each, and prompt_tokens counts them): shared prefixes share their ids.
StatusOr<std::vector<sim::TwinRequest>> Workload(const SimulateFlags& f, int64_t vocab) {
  bench::PromptBuilder pb(nullptr);
  std::vector<bench::RequestSpec> specs;
  std::vector<double> offsets;
  if (f.dataset == "burstgpt") {
    if (f.dataset_path.empty()) return InvalidArgument("simulate: --dataset burstgpt needs --dataset-path FILE");
    ASSIGN_OR_RETURN(std::string text, bench::ReadFile(f.dataset_path));
    int64_t skipped = 0;
    ASSIGN_OR_RETURN(std::vector<bench::TraceRow> rows, bench::ParseBurstGptCsv(text, f.dataset_path, &skipped));
    if (static_cast<int64_t>(rows.size()) > f.num_prompts) rows.resize(static_cast<size_t>(f.num_prompts));
    specs = bench::TraceDataset(rows, pb, f.seed);
    std::vector<double> ts;
    for (const bench::TraceRow& r : rows) ts.push_back(r.timestamp);
    ASSIGN_OR_RETURN(offsets, bench::TraceOffsets(ts, f.time_scale));
  } else {
    if (!f.dataset_path.empty()) return InvalidArgument("simulate: --dataset-path is for --dataset burstgpt");
    const bool shared = f.dataset == "shared-prefix";
    specs = bench::RandomDataset({.num = f.num_prompts, .input_len = f.input_len, .output_len = f.output_len,
                                  .range_ratio = f.range_ratio, .prefix_len = shared ? f.prefix_len : 0,
                                  .num_prefix_groups = shared ? f.num_prefix_groups : 1},
                                 pb, f.seed);
    ASSIGN_OR_RETURN(double rate, ParseRate(f.request_rate));
    offsets = bench::ArrivalOffsets(rate, f.burstiness, static_cast<int64_t>(specs.size()), f.seed);
  }
  const uint64_t v = static_cast<uint64_t>(vocab > 0 ? vocab : 32000);
  std::vector<sim::TwinRequest> out;
  for (size_t i = 0; i < specs.size(); ++i) {
    sim::TwinRequest t;
    t.id = "sim-" + std::to_string(i);
    for (const std::string* text : {&specs[i].system, &specs[i].prompt}) {
      size_t start = 0;
      while (start < text->size()) {
        size_t end = text->find(' ', start);
        if (end == std::string::npos) end = text->size();
        if (end > start) {
          uint64_t h = 1469598103934665603ULL;  // FNV-1a of the word
          for (size_t k = start; k < end; ++k) h = (h ^ static_cast<unsigned char>((*text)[k])) * 1099511628211ULL;
          t.prompt_token_ids.push_back(static_cast<int32_t>(h % v));
        }
        start = end + 1;
      }
    }
    t.max_tokens = specs[i].max_tokens;
    t.arrival_ns = static_cast<int64_t>(std::llround(offsets[i] * 1e9));
    out.push_back(std::move(t));
  }
  return out;
}

int Simulate(const ServeFlags& sf, const SimulateFlags& f) {
  if (Status s = CheckModelled(sf); !s.ok()) return Fail(s);
  StatusOr<ServeOptions> serve = ServeOptionsFromFlags(sf);
  if (!serve.ok()) return Fail(serve.status());
  const EngineLoopOptions& loop = serve->serving.loop;
  StatusOr<SchedulerOptions> so = SchedulerFromFlags(sf, loop);
  if (!so.ok()) return Fail(so.status());
  // --cost-model is serve's (ServeOptionsFromFlags read it); without one, round figures.
  std::shared_ptr<const sim::CostModel> cost = serve->serving.step_cost_model;
  if (!cost) cost = std::make_shared<sim::LinearCostModel>(DefaultCoefficients());
  StatusOr<bench::Slo> slo = bench::ParseSlo(f.goodput);
  if (!slo.ok()) return Fail(slo.status());
  StatusOr<std::vector<sim::TwinRequest>> requests = Workload(f, so->limits.vocab_size);
  if (!requests.ok()) return Fail(requests.status());

  sim::TwinOptions to;
  to.scheduler = *so;
  to.max_step_ms = loop.max_step_ms;
  to.max_in_flight = serve->serving.max_in_flight;
  to.cost = cost.get();
  const auto wall0 = std::chrono::steady_clock::now();
  StatusOr<sim::TwinResult> run = sim::RunTwin(to, *requests);
  if (!run.ok()) return Fail(run.status());
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();

  // Per request, as tessera-bench records a streamed one: a token per chunk.
  std::vector<bench::RequestRecord> records;
  for (size_t i = 0; i < run->requests.size(); ++i) {
    const sim::TwinRequestResult& r = run->requests[i];
    bench::RequestRecord rec;
    rec.sent = true;
    rec.ok = r.ok && !r.token_ns.empty();
    rec.error = r.error;
    rec.send_time = static_cast<double>(r.arrival_ns) / 1e9;
    rec.prompt_tokens = r.prompt_tokens;
    rec.output_tokens = static_cast<int64_t>(r.token_ns.size());
    rec.expected_output_tokens = (*requests)[i].max_tokens;
    rec.usage_reported = true;
    if (rec.ok) {
      rec.ttft = static_cast<double>(r.token_ns.front() - r.arrival_ns) / 1e9;
      rec.e2e = static_cast<double>(r.token_ns.back() - r.arrival_ns) / 1e9;
      for (size_t k = 1; k < r.token_ns.size(); ++k) {
        rec.itl.push_back(static_cast<double>(r.token_ns[k] - r.token_ns[k - 1]) / 1e9);
      }
    }
    records.push_back(std::move(rec));
  }
  const double duration_s = static_cast<double>(run->stats.end_ns) / 1e9;
  const bench::Summary summary = bench::Summarize(records, duration_s, *slo);
  nlohmann::json rj = bench::SummaryJson(summary);
  rj["request_rate"] = f.dataset == "burstgpt" ? nlohmann::json("trace") : nlohmann::json(f.request_rate);
  const SchedulerCounters& c = run->stats.counters;
  rj["twin"] = {{"steps", run->stats.steps},
                {"kv_usage_mean", run->stats.kv_usage_mean},
                {"kv_usage_max", run->stats.kv_usage_max},
                {"preemptions", c.preemptions},
                {"prefix_cache_queries", c.prefix_cache_queries},
                {"prefix_cache_hits", c.prefix_cache_hits},
                {"prompt_tokens_computed", c.prompt_tokens},
                {"wall_s", wall_s},
                {"simulated_requests_per_wall_s", wall_s > 0 ? static_cast<double>(records.size()) / wall_s : 0.0}};
  if (f.per_request) {
    nlohmann::json reqs = nlohmann::json::array();
    for (const bench::RequestRecord& r : records) reqs.push_back(bench::RecordJson(r));
    rj["requests"] = std::move(reqs);
  }
  const nlohmann::json config = {
      {"dataset", f.dataset},         {"dataset_path", f.dataset_path},
      {"num_prompts", f.num_prompts}, {"input_len", f.input_len},
      {"output_len", f.output_len},   {"range_ratio", f.range_ratio},
      {"prefix_len", f.dataset == "shared-prefix" ? f.prefix_len : 0},
      {"num_prefix_groups", f.num_prefix_groups},
      {"seed", f.seed},               {"burstiness", f.burstiness},
      {"time_scale", f.time_scale},   {"cost_model", sf.cost_model.empty() ? "default (not calibrated)" : sf.cost_model},
      {"max_num_seqs", so->max_num_seqs},
      {"max_num_batched_tokens", so->max_num_batched_tokens},
      {"max_step_ms", loop.max_step_ms},
      {"num_kv_blocks", so->kv.num_blocks},
      {"block_size", so->kv.block_size},
      {"max_model_len", so->limits.max_model_len}};
  const nlohmann::json doc = {{"tool", "tessera simulate"}, {"config", config}, {"runs", {rj}}};
  std::fputs(bench::FormatSummary(summary, "tessera simulate (virtual time)").c_str(), stderr);
  if (!f.svg.empty()) {
    std::ofstream svg(f.svg, std::ios::binary);
    svg << bench::SingleRunSvg(records, "tessera simulate: " + f.dataset + " (virtual time)");
    svg.close();
    if (!svg) return Fail(Status(StatusCode::kUnavailable, "simulate: cannot write --svg " + f.svg));
  }
  if (f.result_json.empty()) {
    std::printf("%s\n", doc.dump(2).c_str());
    return 0;
  }
  std::ofstream out(f.result_json, std::ios::binary);
  out << doc.dump(2) << "\n";
  out.close();
  if (!out) return Fail(Status(StatusCode::kUnavailable, "simulate: cannot write --result-json " + f.result_json));
  return 0;
}

}  // namespace

void AddSimulateCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "simulate",
      "Run a workload through the real scheduler on a virtual clock, a cost model in place of the model "
      "(serve's settings and --config file, tessera-bench's workloads and metrics)");
  auto sf = std::make_shared<ServeFlags>();
  auto f = std::make_shared<SimulateFlags>();
  cmd->add_option("--config", f->config, "serve's TOML settings file (long option names as keys); flags win")
      ->check(CLI::ExistingFile);
  AddServeFlags(cmd, sf.get());
  cmd->add_option("--dataset", f->dataset, "tessera-bench's workloads: random, shared-prefix, burstgpt")
      ->check(CLI::IsMember({"random", "shared-prefix", "burstgpt"}))
      ->capture_default_str()
      ->group("Simulation");
  cmd->add_option("--dataset-path", f->dataset_path, "burstgpt: the BurstGPT CSV")->group("Simulation");
  cmd->add_option("--num-prompts", f->num_prompts, "requests (burstgpt: the first N usable rows)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Simulation");
  cmd->add_option("--input-len", f->input_len, "prompt tokens (after the prefix)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Simulation");
  cmd->add_option("--output-len", f->output_len, "output tokens (ignore_eos: every request makes this many)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Simulation");
  cmd->add_option("--range-ratio", f->range_ratio, "lengths uniform in [len*(1-r), len*(1+r)]")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0))
      ->group("Simulation");
  cmd->add_option("--prefix-len", f->prefix_len, "shared-prefix: tokens of each shared prefix")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Simulation");
  cmd->add_option("--num-prefix-groups", f->num_prefix_groups, "shared-prefix: distinct prefixes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Simulation");
  cmd->add_option("--seed", f->seed, "workload and arrival seed")->capture_default_str()->group("Simulation");
  cmd->add_option("--request-rate", f->request_rate, "requests/s, Poisson (or gamma with --burstiness); inf: all at 0")
      ->capture_default_str()
      ->group("Simulation");
  cmd->add_option("--burstiness", f->burstiness, "gamma shape of the gaps: 1 = Poisson, < 1 burstier, 1e9 = fixed gaps of 1/rate")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Simulation");
  cmd->add_option("--time-scale", f->time_scale, "burstgpt: multiply the trace's times")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Simulation");
  cmd->add_option("--goodput", f->goodput, "SLOs for goodput, e.g. ttft:500 tpot:50 (milliseconds)")->group("Simulation");
  cmd->add_option("--result-json", f->result_json, "write the JSON here (default: stdout)")->group("Simulation");
  cmd->add_option("--svg", f->svg, "write tessera-bench's latency CDFs and TTFT-over-time chart here")
      ->group("Simulation");
  cmd->add_flag("--per-request", f->per_request, "add each request's record to the JSON")->group("Simulation");
  cmd->callback([cmd, sf, f, exit_code] {
    if (!f->config.empty()) {
      if (Status s = ApplyServeConfigFile(cmd, f->config); !s.ok()) {
        *exit_code = Fail(s);
        return;
      }
    }
    *exit_code = Simulate(*sf, *f);
  });
}

}  // namespace tessera
