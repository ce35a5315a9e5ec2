// `tessera plan`: picks a deployment for an SLO with the twin (runtime/sim/
// plan.h; docs/architecture.md, "Twin"). The trace is a tessera-bench
// workload (simulate's flags, or --trace CSV for a BurstGPT file); step times
// come from a cost model per TP degree — derived from the device's published
// figures (--hardware, runtime/sim/hardware.h) or a calibrated file
// (--cost-model: one instance per device or socket, TP 1). Every candidate
// that uses the whole --budget is simulated; the best ones get a goodput
// curve over scaled arrival rates. Writes serve.toml, a kustomize overlay and
// plan.json to --output-dir: predictions, labelled as such.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/tessera_bench/metrics.h"
#include "cli/commands.h"
#include "cli/hardware_flags.h"
#include "cli/plan_output.h"
#include "cli/serve_flags.h"
#include "cli/serve_options.h"
#include "cli/sim_workload.h"
#include "common/log.h"
#include "engine/parallel/shard/shard_plan.h"
#include "runtime/sim/plan.h"

namespace tessera {
namespace {

struct PlanFlags {
  std::string config;
  WorkloadFlags workload;
  std::string trace;
  std::string slo;
  HardwareFlags hardware;
  int budget = 0;
  std::vector<int> tensor_parallel_sizes;  // empty: every divisor of the budget the model allows
  std::vector<int32_t> max_num_seqs = {64, 128, 256};
  std::vector<int64_t> max_num_batched_tokens = {2048, 8192};
  std::vector<double> max_step_ms = {0, 100};
  bool pd = false;
  sim::KvTransferModel transfer;  // bandwidth and latency from the flags
  std::vector<double> rate_factors = {0.25, 0.5, 1, 1.5, 2, 3, 4};
  double attainment = 0.9;
  int top = 3;
  std::string output_dir;
  std::string k8s_overlay;
};

// "ttft:500,tpot:50" as tessera-bench's --goodput items.
StatusOr<bench::Slo> ParsePlanSlo(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) items.push_back(item);
  }
  StatusOr<bench::Slo> slo = bench::ParseSlo(items);
  if (!slo.ok()) return InvalidArgument("plan: --slo: " + slo.status().message());
  if (!slo->any()) return InvalidArgument("plan: --slo needs at least one bound, e.g. ttft:500,tpot:50");
  return slo;
}

nlohmann::ordered_json CandidateJson(const sim::PlanCandidate& c) {
  return {{"tensor_parallel_size", c.tensor_parallel_size},
          {"data_parallel_size", c.data_parallel_size},
          {"max_num_seqs", c.max_num_seqs},
          {"max_num_batched_tokens", c.max_num_batched_tokens},
          {"max_step_ms", c.max_step_ms},
          {"prefill_instances", c.prefill_instances},
          {"decode_instances", c.prefill_instances > 0 ? c.data_parallel_size - c.prefill_instances : 0}};
}

nlohmann::ordered_json EvalJson(const sim::PlanEval& e) {
  return {{"plan", CandidateJson(e.candidate)},
          {"predicted_goodput_rps", e.score.goodput_rps},
          {"predicted_slo_attainment", e.score.attainment},
          {"predicted_preemptions", e.preemptions}};
}

// The cost model and KV pool of each TP degree the model allows within the
// budget, and each one's provenance for plan.json.
struct CostSetup {
  std::map<int, sim::TpSetup> tp;
  nlohmann::ordered_json provenance = nlohmann::ordered_json::object();
};

// Each TP degree's pool: t devices' memory less the weights (--num-kv-blocks,
// when given, for every degree).
StatusOr<CostSetup> DerivedSetup(const PlanFlags& f, const ServeFlags& sf, int64_t block_size) {
  ASSIGN_OR_RETURN(sim::HardwareSpec hw, ResolveHardware(f.hardware));
  ASSIGN_OR_RETURN(std::string model, ModelPathForTwin(sf));
  if (model.empty()) return InvalidArgument("plan: --hardware needs --model (its config gives the shape)");
  ASSIGN_OR_RETURN(ModelConfig config, ReadModelConfig(model));
  const sim::ModelShape shape = ModelShapeOf(config);
  CostSetup out;
  for (int t = 1; t <= f.budget; ++t) {
    parallel::ShardOptions shard;
    shard.world_size = t;
    if (f.budget % t != 0 || !parallel::MakeShardPlan(config, shard).ok()) continue;  // the engine's own rule
    if (!f.tensor_parallel_sizes.empty() &&
        std::find(f.tensor_parallel_sizes.begin(), f.tensor_parallel_sizes.end(), t) == f.tensor_parallel_sizes.end()) {
      continue;
    }
    sim::DeriveOptions options;
    options.tensor_parallel_size = t;
    ASSIGN_OR_RETURN(sim::LinearCoefficients c, sim::DeriveCoefficients(shape, hw, options));
    const int64_t kv_tokens = sim::DerivedKvTokens(shape, hw, t, sf.gpu_memory_utilization);
    if (kv_tokens < block_size) continue;  // the weights do not fit on t devices
    auto model_ptr = std::make_shared<sim::LinearCostModel>(c);
    out.provenance[std::to_string(t)] = nlohmann::ordered_json::parse(model_ptr->ToJson(
        sim::DerivedProvenanceJson(shape, hw, options)));
    const int64_t blocks = std::min<int64_t>(kv_tokens / block_size, std::numeric_limits<int32_t>::max());
    out.tp[t] = {model_ptr, sf.num_kv_blocks > 0 ? sf.num_kv_blocks : blocks};
  }
  if (out.tp.empty()) {
    return InvalidArgument(fmt::format("plan: {} does not fit on {} x {} ({} GB each) at any TP degree its heads allow",
                                       model, f.budget, hw.name, hw.memory_gb));
  }
  return out;
}

StatusOr<CostSetup> CalibratedSetup(const ServeFlags& sf, const ServeOptions& serve, const SchedulerOptions& so) {
  if (sf.cost_model.empty() || !serve.serving.step_cost_model) {
    return InvalidArgument("plan: step times need --hardware SPEC (derived) or --cost-model FILE (calibrated)");
  }
  CostSetup out;
  out.tp[1] = {serve.serving.step_cost_model, so.kv.num_blocks};
  std::ifstream in(sf.cost_model, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  out.provenance["1"] = nlohmann::ordered_json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  return out;
}

int Plan(ServeFlags sf, PlanFlags f) {
  if (!f.trace.empty()) {
    f.workload.dataset = "burstgpt";
    f.workload.dataset_path = f.trace;
  }
  if (sf.tensor_parallel_size > 1 || sf.data_parallel_size > 1) {
    return Fail(InvalidArgument("plan: -tp/-dp are what plan chooses (from --budget); do not give them"));
  }
  if (Status s = CheckModelled(sf, "plan"); !s.ok()) return Fail(s);
  StatusOr<bench::Slo> slo = ParsePlanSlo(f.slo);
  if (!slo.ok()) return Fail(slo.status());
  StatusOr<ServeOptions> serve = ServeOptionsFromFlags(sf);
  if (!serve.ok()) return Fail(serve.status());
  const bool derived = f.hardware.given();
  if (derived && !sf.cost_model.empty()) {
    return Fail(InvalidArgument("plan: --hardware derives the step times; --cost-model gives them: one of the two"));
  }
  EngineLoopOptions loop = serve->serving.loop;
  CostSetup setup;
  if (derived) {
    StatusOr<CostSetup> d = DerivedSetup(f, sf, loop.scheduler.kv.block_size);
    if (!d.ok()) return Fail(d.status());
    setup = std::move(*d);
    // The context length is capped by the largest pool, not serve's CPU default.
    int64_t most = 0;
    for (const auto& [t, s] : setup.tp) most = std::max(most, s.num_kv_blocks);
    if (loop.scheduler.kv.num_blocks <= 0) loop.scheduler.kv.num_blocks = static_cast<int32_t>(most);
  }
  StatusOr<SchedulerOptions> so = SchedulerFromFlags(sf, loop, "plan");
  if (!so.ok()) return Fail(so.status());
  if (!derived) {
    StatusOr<CostSetup> c = CalibratedSetup(sf, *serve, *so);
    if (!c.ok()) return Fail(c.status());
    setup = std::move(*c);
  }
  StatusOr<std::vector<sim::TwinRequest>> trace = BuildWorkload(f.workload, so->limits.vocab_size, "plan");
  if (!trace.ok()) return Fail(trace.status());

  sim::PlanInputs inputs;
  inputs.scheduler = *so;
  inputs.max_in_flight = serve->serving.max_in_flight;
  inputs.tp = setup.tp;
  const bench::Slo bounds = *slo;
  // tessera-bench's goodput: requests meeting every bound per second of the run.
  inputs.score = [bounds](const std::vector<sim::TwinRequestResult>& results, int64_t end_ns) {
    const bench::Summary s = bench::Summarize(TwinRecords(results, {}), static_cast<double>(end_ns) / 1e9, bounds);
    return sim::PlanScore{s.goodput.value_or(0.0),
                          s.num_requests > 0 ? static_cast<double>(s.good_requests) / s.num_requests : 0.0};
  };
  if (f.pd) {
    // The pulled KV's size: the model's, in the pool's dtype (f32 on CPU, BF16 on a GPU).
    StatusOr<std::string> model = ModelPathForTwin(sf);
    if (!model.ok()) return Fail(model.status());
    if (model->empty()) return Fail(InvalidArgument("plan: --search-pd needs --model (the KV bytes per token)"));
    StatusOr<ModelConfig> config = ReadModelConfig(*model);
    if (!config.ok()) return Fail(config.status());
    inputs.transfer = f.transfer;
    inputs.transfer.kv_bytes_per_token = config->KvBytesPerToken(derived || sf.device != "cpu" ? 2 : 4);
  }
  sim::PlanSpace space;
  space.budget = f.budget;
  space.pd = f.pd;
  for (const auto& [t, unused] : setup.tp) space.tensor_parallel_sizes.push_back(t);
  space.max_num_seqs = f.max_num_seqs;
  space.max_num_batched_tokens = f.max_num_batched_tokens;
  space.max_step_ms = f.max_step_ms;
  StatusOr<std::vector<sim::PlanEval>> ranked = sim::SearchPlans(space, inputs, *trace);
  if (!ranked.ok()) return Fail(ranked.status());

  nlohmann::ordered_json top = nlohmann::ordered_json::array();
  const size_t n_top = std::min(ranked->size(), static_cast<size_t>(f.top));
  for (size_t i = 0; i < n_top; ++i) {
    const sim::PlanEval& e = (*ranked)[i];
    StatusOr<std::vector<sim::CurvePoint>> curve = sim::GoodputCurve(e.candidate, inputs, *trace, f.rate_factors);
    if (!curve.ok()) return Fail(curve.status());
    nlohmann::ordered_json j = EvalJson(e);
    nlohmann::ordered_json points = nlohmann::ordered_json::array();
    for (const sim::CurvePoint& p : *curve) {
      points.push_back({{"request_rate_rps", p.rate_rps},
                        {"predicted_goodput_rps", p.score.goodput_rps},
                        {"predicted_slo_attainment", p.score.attainment}});
    }
    j["predicted_curve"] = std::move(points);
    j["predicted_max_rate_rps"] = sim::MaxRateMeeting(*curve, f.attainment);
    top.push_back(std::move(j));
    std::fprintf(stderr, "plan #%zu: tp %d x %d instances (%d prefill), max-num-seqs %d, max-num-batched-tokens "
                 "%lld, max-step-ms %g: goodput %.2f req/s (%.0f%% meet the SLO); %.0f%% attainment up to %.2f req/s "
                 "(predicted)\n",
                 i + 1, e.candidate.tensor_parallel_size, e.candidate.data_parallel_size, e.candidate.prefill_instances,
                 e.candidate.max_num_seqs,
                 static_cast<long long>(e.candidate.max_num_batched_tokens), e.candidate.max_step_ms,
                 e.score.goodput_rps, 100 * e.score.attainment, 100 * f.attainment,
                 sim::MaxRateMeeting(*curve, f.attainment));
  }
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  for (const sim::PlanEval& e : *ranked) all.push_back(EvalJson(e));
  const WorkloadFlags& w = f.workload;
  nlohmann::ordered_json slo_json = nlohmann::ordered_json::object();
  if (slo->ttft_ms) slo_json["ttft_ms"] = *slo->ttft_ms;
  if (slo->tpot_ms) slo_json["tpot_ms"] = *slo->tpot_ms;
  if (slo->e2el_ms) slo_json["e2el_ms"] = *slo->e2el_ms;
  const nlohmann::ordered_json doc = {
      {"tool", std::string("tessera plan ") + kTesseraVersion},
      {"prediction",
       std::string("every figure here is predicted by the twin (the real scheduler on a virtual clock) from a ") +
           (derived ? "cost model derived from published hardware figures, not measured on the hardware"
                    : "cost model calibrated on a machine (its provenance below)") +
           "; check it by running the plan with tessera-bench"},
      {"trace",
       {{"dataset", w.dataset}, {"dataset_path", w.dataset_path}, {"num_prompts", trace->size()},
        {"input_len", w.input_len}, {"output_len", w.output_len}, {"request_rate", w.request_rate},
        {"burstiness", w.burstiness}, {"time_scale", w.time_scale}, {"seed", w.seed}}},
      {"slo", slo_json},
      {"attainment_threshold", f.attainment},
      {"budget_devices", f.budget},
      {"routing", "round-robin over the instances (of each pool, for PD)"},
      {"kv_transfer", f.pd ? nlohmann::ordered_json{{"bandwidth_gb_s", inputs.transfer.bandwidth_gb_s},
                                                    {"latency_ms", inputs.transfer.latency_ms},
                                                    {"kv_bytes_per_token", inputs.transfer.kv_bytes_per_token}}
                           : nlohmann::ordered_json()},
      {"best", top.empty() ? nlohmann::ordered_json() : top[0]},
      {"runner_ups", top.size() > 1 ? nlohmann::ordered_json(std::vector<nlohmann::ordered_json>(top.begin() + 1, top.end()))
                                    : nlohmann::ordered_json::array()},
      {"candidates", all},
      {"cost_models_by_tp", setup.provenance}};
  if (f.output_dir.empty()) {
    std::printf("%s\n", doc.dump(2).c_str());
    return 0;
  }
  const sim::PlanCandidate& best = ranked->front().candidate;
  std::error_code ec;
  std::filesystem::create_directories(f.output_dir, ec);
  if (ec) return Fail(Status(StatusCode::kUnavailable, "plan: cannot create --output-dir " + f.output_dir));
  const std::string overlay_src = !f.k8s_overlay.empty()    ? f.k8s_overlay
                                  : best.prefill_instances > 0 ? "deploy/k8s/overlays/disaggregated"
                                  : derived                    ? "deploy/k8s/overlays/gpu"
                                                               : "deploy/k8s/overlays/cpu";
  const std::filesystem::path overlay_abs = std::filesystem::absolute(overlay_src).lexically_normal();
  std::string base_toml;
  std::ifstream base_in(overlay_abs / "../../config/serve.toml", std::ios::binary);
  if (base_in) {
    std::stringstream ss;
    ss << base_in.rdbuf();
    base_toml = ss.str();
  }
  const std::string header = fmt::format(
      "Planned by `tessera plan` (plan.json): a PREDICTION of the twin for {} devices, not a measurement.\n"
      "Predicted goodput {:.2f} req/s under the SLO on the planned trace.",
      f.budget, ranked->front().score.goodput_rps);
  const std::string toml = PlannedServeToml(base_toml, best, sf.max_pending_requests, header);
  const std::string overlay_dir = f.output_dir + "/k8s";
  OverlayOptions oo;
  oo.base_relative =
      std::filesystem::relative(overlay_abs, std::filesystem::absolute(overlay_dir).lexically_normal()).string();
  oo.gpus = derived;
  oo.header = header;
  for (const Status& s : {WriteTextFile(f.output_dir + "/serve.toml", toml),
                          WriteKustomizeOverlay(overlay_dir, best, toml, oo),
                          WriteTextFile(f.output_dir + "/plan.json", doc.dump(2) + "\n")}) {
    if (!s.ok()) return Fail(s);
  }
  LogInfo("plan: wrote {}/serve.toml, {}/k8s (kustomize overlay over {}), {}/plan.json", f.output_dir,
          f.output_dir, overlay_src, f.output_dir);
  return 0;
}

}  // namespace

void AddPlanCommand(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "plan",
      "Choose TP degree, instances and batch limits for a trace and an SLO by simulating each candidate with the "
      "twin; writes serve.toml, a kustomize overlay and plan.json (predictions)");
  auto sf = std::make_shared<ServeFlags>();
  auto f = std::make_shared<PlanFlags>();
  cmd->add_option("--config", f->config, "serve's TOML settings file (long option names as keys); flags win")
      ->check(CLI::ExistingFile);
  AddServeFlags(cmd, sf.get());
  AddWorkloadFlags(cmd, &f->workload);
  AddHardwareFlags(cmd, &f->hardware);
  cmd->add_option("--trace", f->trace, "a BurstGPT CSV (as --dataset burstgpt --dataset-path FILE)")
      ->check(CLI::ExistingFile)
      ->group("Plan");
  cmd->add_option("--slo", f->slo, "bounds in milliseconds, e.g. ttft:500,tpot:50 (also e2el)")
      ->required()
      ->group("Plan");
  cmd->add_option("--budget", f->budget, "devices (GPUs; with a calibrated --cost-model: CPU instances)")
      ->required()
      ->check(CLI::Range(1, 4096))
      ->group("Plan");
  cmd->add_option("--search-tensor-parallel-sizes", f->tensor_parallel_sizes,
                  "TP degrees to try (default: every divisor of --budget the model's heads allow)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->group("Plan");
  cmd->add_option("--search-max-num-seqs", f->max_num_seqs, "max-num-seqs values to try")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Plan");
  cmd->add_option("--search-max-num-batched-tokens", f->max_num_batched_tokens,
                  "max-num-batched-tokens values to try")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Plan");
  cmd->add_option("--search-max-step-ms", f->max_step_ms, "max-step-ms values to try (0: token-bounded steps)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group("Plan");
  cmd->add_flag("--search-pd", f->pd,
                "also every prefill:decode split of the instances (the router's PD layout, KV pulled between them)")
      ->group("Plan");
  cmd->add_option("--kv-transfer-bandwidth", f->transfer.bandwidth_gb_s,
                  "PD: GB/s of a KV pull (default: UCX tcp,self measured on this project's CPU machine)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Plan");
  cmd->add_option("--kv-transfer-latency-ms", f->transfer.latency_ms, "PD: fixed time of each KV pull")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group("Plan");
  cmd->add_option("--rate-factors", f->rate_factors, "the goodput curve: the trace's arrival rate times these")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Plan");
  cmd->add_option("--attainment", f->attainment, "the SLO attainment the curve's max rate must keep")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0))
      ->group("Plan");
  cmd->add_option("--top", f->top, "plans that get a curve (the best and its runner-ups)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100))
      ->group("Plan");
  cmd->add_option("--output-dir", f->output_dir, "write serve.toml, k8s/ and plan.json here (default: plan.json "
                                                 "to stdout)")
      ->group("Plan");
  cmd->add_option("--k8s-overlay", f->k8s_overlay,
                  "the deploy/k8s overlay the generated one builds on (default: overlays/gpu with --hardware, "
                  "overlays/cpu otherwise, relative to the working directory)")
      ->group("Plan");
  cmd->callback([cmd, sf, f, exit_code] {
    if (!f->config.empty()) {
      if (Status s = ApplyServeConfigFile(cmd, f->config); !s.ok()) {
        *exit_code = Fail(s);
        return;
      }
    }
    *exit_code = Plan(*sf, *f);
  });
}

}  // namespace tessera
