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
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "bench/tessera_bench/metrics.h"
#include "bench/tessera_bench/report.h"
#include "cli/commands.h"
#include "cli/serve_flags.h"
#include "cli/serve_options.h"
#include "cli/sim_workload.h"
#include "runtime/sim/twin.h"

namespace tessera {
namespace {

struct SimulateFlags {
  std::string config;
  WorkloadFlags workload;
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

// --device other than cpu sizes its KV pool by profiling the device, which
// the twin cannot do.
Status CheckKvSized(const ServeFlags& f) {
  if (f.device != "cpu" && f.num_kv_blocks <= 0 && !f.kv_cache_mb_set) {
    return InvalidArgument("simulate: --device " + f.device +
                           " sizes its KV pool by profiling the device; give --num-kv-blocks or --kv-cache-mb");
  }
  return Status::Ok();
}

int Simulate(const ServeFlags& sf, const SimulateFlags& f) {
  const WorkloadFlags& w = f.workload;
  if (Status s = CheckModelled(sf, "simulate"); !s.ok()) return Fail(s);
  if (Status s = CheckKvSized(sf); !s.ok()) return Fail(s);
  StatusOr<ServeOptions> serve = ServeOptionsFromFlags(sf);
  if (!serve.ok()) return Fail(serve.status());
  const EngineLoopOptions& loop = serve->serving.loop;
  StatusOr<SchedulerOptions> so = SchedulerFromFlags(sf, loop, "simulate");
  if (!so.ok()) return Fail(so.status());
  // --cost-model is serve's (ServeOptionsFromFlags read it); without one, round figures.
  std::shared_ptr<const sim::CostModel> cost = serve->serving.step_cost_model;
  if (!cost) cost = std::make_shared<sim::LinearCostModel>(DefaultCoefficients());
  StatusOr<bench::Slo> slo = bench::ParseSlo(f.goodput);
  if (!slo.ok()) return Fail(slo.status());
  StatusOr<std::vector<sim::TwinRequest>> requests = BuildWorkload(f.workload, so->limits.vocab_size, "simulate");
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

  const std::vector<bench::RequestRecord> records = TwinRecords(run->requests, *requests);
  const double duration_s = static_cast<double>(run->stats.end_ns) / 1e9;
  const bench::Summary summary = bench::Summarize(records, duration_s, *slo);
  nlohmann::json rj = bench::SummaryJson(summary);
  rj["request_rate"] = w.dataset == "burstgpt" ? nlohmann::json("trace") : nlohmann::json(w.request_rate);
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
      {"dataset", w.dataset},         {"dataset_path", w.dataset_path},
      {"num_prompts", w.num_prompts}, {"input_len", w.input_len},
      {"output_len", w.output_len},   {"range_ratio", w.range_ratio},
      {"prefix_len", w.dataset == "shared-prefix" ? w.prefix_len : 0},
      {"num_prefix_groups", w.num_prefix_groups},
      {"seed", w.seed},               {"burstiness", w.burstiness},
      {"time_scale", w.time_scale},   {"cost_model", sf.cost_model.empty() ? "default (not calibrated)" : sf.cost_model},
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
    svg << bench::SingleRunSvg(records, "tessera simulate: " + w.dataset + " (virtual time)");
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
  AddWorkloadFlags(cmd, &f->workload);
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
