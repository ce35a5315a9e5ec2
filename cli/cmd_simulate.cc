// `tessera simulate`: a workload through the twin (runtime/sim/; docs/
// architecture.md, "Twin") — the real scheduler and KV-cache manager on a
// virtual clock, the forward replaced by a cost model. It takes every setting
// of `tessera serve` (its flags and its --config file; the scheduling ones
// decide, the others — ports, keys, parsers — have nothing to act on) and
// tessera-bench's workload flags (its datasets, arrivals and metric names),
// and writes tessera-bench's JSON (and SVG) with the twin's figures beside them.
// Layouts (runtime/sim/cluster.h): --instances N behind the router's
// --routing-logic, or --prefill-instances P --decode-instances D with the KV
// transfer modelled (--kv-transfer-bandwidth, --kv-transfer-latency-ms).
#include <algorithm>
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
#include "runtime/sim/cluster.h"

namespace tessera {
namespace {

struct SimulateFlags {
  std::string config;
  WorkloadFlags workload;
  std::vector<std::string> goodput;
  std::string result_json;
  std::string svg;
  bool per_request = false;
  // Layouts (runtime/sim/cluster.h). The router's own flags (serve registers
  // them) say the rest: --prefill-instances, --decode-instances,
  // --routing-logic, --prefill-threshold.
  int32_t instances = 1;
  double kv_transfer_bandwidth = sim::KvTransferModel().bandwidth_gb_s;
  double kv_transfer_latency_ms = sim::KvTransferModel().latency_ms;
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

// A pool's size from the router's --prefill-instances / --decode-instances:
// a count ("4"), or the router's list of addresses (one instance each), so a
// router's flags or config file simulate as they are.
StatusOr<int32_t> PoolSize(const std::vector<std::string>& entries, const char* flag) {
  if (entries.size() == 1 && !entries[0].empty() &&
      entries[0].find_first_not_of("0123456789") == std::string::npos) {
    const long n = std::strtol(entries[0].c_str(), nullptr, 10);
    if (n < 1 || n > 4096) return InvalidArgument(std::string("simulate: ") + flag + " " + entries[0] + ": 1 to 4096");
    return static_cast<int32_t>(n);
  }
  return static_cast<int32_t>(entries.size());
}

// The layout flags as the cluster's options; every instance runs `serve`'s settings.
StatusOr<sim::ClusterOptions> LayoutFromFlags(const SimulateFlags& f, const RouterFlags& rf,
                                              const sim::TwinOptions& instance, int64_t kv_bytes_per_token) {
  sim::ClusterOptions co;
  ASSIGN_OR_RETURN(co.routing_logic, ParseRoutingLogic(rf.routing_logic));
  if (!rf.instances_file.empty()) {
    return InvalidArgument("simulate: --instances-file is not read; give --prefill-instances and --decode-instances");
  }
  co.unified = co.prefill = co.decode = instance;
  co.instances = f.instances;
  co.poll_interval_ms = rf.poll_interval_s * 1000;
  ASSIGN_OR_RETURN(const int32_t prefill, PoolSize(rf.prefill_instances, "--prefill-instances"));
  ASSIGN_OR_RETURN(const int32_t decode, PoolSize(rf.decode_instances, "--decode-instances"));
  if (prefill == 0) {
    // No prefill pool: the router's decode instances are the unified ones.
    if (decode > 0 && f.instances != 1) return InvalidArgument("simulate: give --instances or --decode-instances");
    if (decode > 0) co.instances = decode;
    return co;
  }
  if (decode == 0) return InvalidArgument("simulate: the PD layout needs --decode-instances too");
  if (f.instances != 1) return InvalidArgument("simulate: --instances is the unified layout's; PD counts its pools");
  if (kv_bytes_per_token <= 0) {
    return InvalidArgument("simulate: the PD layout needs --model (its config gives the KV bytes each token moves)");
  }
  co.layout = sim::ClusterLayout::kPd;
  co.prefill_instances = prefill;
  co.decode_instances = decode;
  co.prefill_threshold = rf.prefill_threshold;
  co.transfer.bandwidth_gb_s = f.kv_transfer_bandwidth;
  co.transfer.latency_ms = f.kv_transfer_latency_ms;
  co.transfer.kv_bytes_per_token = kv_bytes_per_token;
  return co;
}

// The twin's own figures: summed over instances, then the layout and each instance.
nlohmann::json TwinJson(const sim::ClusterOptions& co, const sim::ClusterResult& run) {
  const bool pd = co.layout == sim::ClusterLayout::kPd;
  nlohmann::json instances = nlohmann::json::array();
  int64_t steps = 0, queries = 0, hits = 0, computed = 0;
  double usage_max = 0;
  for (const sim::ClusterInstanceStats& s : run.instances) {
    const SchedulerCounters& c = s.stats.counters;
    steps += s.stats.steps;
    queries += c.prefix_cache_queries;
    hits += c.prefix_cache_hits;
    computed += c.prompt_tokens;
    usage_max = std::max(usage_max, s.stats.kv_usage_max);
    nlohmann::json j = {{"role", s.role},
                        {"index", s.index},
                        {"requests", s.requests},
                        {"steps", s.stats.steps},
                        {"kv_usage_mean", s.stats.kv_usage_mean},
                        {"kv_usage_max", s.stats.kv_usage_max},
                        {"preemptions", c.preemptions},
                        {"prefix_cache_hits", c.prefix_cache_hits},
                        {"prompt_tokens_computed", c.prompt_tokens}};
    if (s.role == "decode") j["kv_pulls"] = s.pulls;
    instances.push_back(std::move(j));
  }
  nlohmann::json layout = {{"layout", pd ? "pd" : "unified"},
                           {"routing_logic", RoutingLogicName(co.routing_logic)},
                           {"router_poll_interval_s", co.poll_interval_ms / 1000}};
  if (pd) {
    layout["prefill_instances"] = co.prefill_instances;
    layout["decode_instances"] = co.decode_instances;
    layout["prefill_threshold"] = co.prefill_threshold;
    layout["kv_transfer"] = {{"bandwidth_gb_s", co.transfer.bandwidth_gb_s},
                             {"latency_ms", co.transfer.latency_ms},
                             {"kv_bytes_per_token", co.transfer.kv_bytes_per_token},
                             {"transfers", run.stats.transfers},
                             {"bytes", run.stats.transfer_bytes}};
  } else {
    layout["instances"] = co.instances;
  }
  double usage_mean = 0;  // over instances, each its mean over its steps
  for (const sim::ClusterInstanceStats& s : run.instances) usage_mean += s.stats.kv_usage_mean;
  if (!run.instances.empty()) usage_mean /= static_cast<double>(run.instances.size());
  return {{"steps", steps},
          {"kv_usage_mean", usage_mean},
          {"kv_usage_max", usage_max},
          {"preemptions", run.stats.preemptions},
          {"prefix_cache_queries", queries},
          {"prefix_cache_hits", hits},
          {"prompt_tokens_computed", computed},
          {"router_hit_tokens", run.stats.router_hit_tokens},
          {"layout", std::move(layout)},
          {"instances", std::move(instances)}};
}

int Simulate(ServeFlags sf, const SimulateFlags& f) {
  const WorkloadFlags& w = f.workload;
  // The router's flags describe the layout; each instance gets the rest (serve
  // refuses router flags without --role router).
  const RouterFlags router = sf.router;
  sf.router = RouterFlags();
  if (Status s = CheckModelled(sf, "simulate"); !s.ok()) return Fail(s);
  if (Status s = CheckKvSized(sf); !s.ok()) return Fail(s);
  StatusOr<ServeOptions> serve = ServeOptionsFromFlags(sf);
  if (!serve.ok()) return Fail(serve.status());
  const EngineLoopOptions& loop = serve->serving.loop;
  int64_t kv_bytes_per_token = 0;
  StatusOr<SchedulerOptions> so = SchedulerFromFlags(sf, loop, "simulate", &kv_bytes_per_token);
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
  StatusOr<sim::ClusterOptions> co = LayoutFromFlags(f, router, to, kv_bytes_per_token);
  if (!co.ok()) return Fail(co.status());
  const auto wall0 = std::chrono::steady_clock::now();
  StatusOr<sim::ClusterResult> run = sim::RunCluster(*co, *requests);
  if (!run.ok()) return Fail(run.status());
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();

  const std::vector<bench::RequestRecord> records = TwinRecords(run->requests, *requests);
  const double duration_s = static_cast<double>(run->stats.end_ns) / 1e9;
  const bench::Summary summary = bench::Summarize(records, duration_s, *slo);
  nlohmann::json rj = bench::SummaryJson(summary);
  rj["request_rate"] = w.dataset == "burstgpt" ? nlohmann::json("trace") : nlohmann::json(w.request_rate);
  rj["twin"] = TwinJson(*co, *run);
  rj["twin"]["wall_s"] = wall_s;
  rj["twin"]["simulated_requests_per_wall_s"] = wall_s > 0 ? static_cast<double>(records.size()) / wall_s : 0.0;
  if (f.per_request) {
    nlohmann::json reqs = nlohmann::json::array();
    for (size_t i = 0; i < records.size(); ++i) {
      nlohmann::json j = bench::RecordJson(records[i]);
      const sim::ClusterRoute& route = run->routes[i];
      j["instance"] = route.instance;
      if (co->layout == sim::ClusterLayout::kPd) j["prefill_instance"] = route.prefill_instance;
      j["router_hit_tokens"] = route.hit_tokens;
      if (route.transfer_end_ns >= 0) {
        j["kv_transfer"] = {{"bytes", route.transfer_bytes},
                            {"start_s", static_cast<double>(route.transfer_start_ns) / 1e9},
                            {"end_s", static_cast<double>(route.transfer_end_ns) / 1e9}};
      }
      reqs.push_back(std::move(j));
    }
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
  cmd->add_option("--instances", f->instances,
                  "unified instances behind the router, each with serve's settings (PD: the router's "
                  "--prefill-instances and --decode-instances, each a count or its list of addresses)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Layout");
  cmd->add_option("--kv-transfer-bandwidth", f->kv_transfer_bandwidth,
                  "PD: GB/s of a KV pull (default: UCX tcp,self measured on this project's CPU machine)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Layout");
  cmd->add_option("--kv-transfer-latency-ms", f->kv_transfer_latency_ms,
                  "PD: fixed time of each KV pull (handshake; default measured as the bandwidth)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group("Layout");
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
