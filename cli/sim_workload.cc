#include "cli/sim_workload.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>

#include "bench/tessera_bench/arrival.h"
#include "bench/tessera_bench/dataset.h"
#include "cli/default_model.h"
#include "engine/gguf.h"
#include "engine/gguf_model.h"
#include "runtime/scheduler_limits.h"

namespace tessera {
namespace {

StatusOr<double> ParseRate(const std::string& text, const std::string& who) {
  if (text == "inf") return std::numeric_limits<double>::infinity();
  char* end = nullptr;
  const double r = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !(r > 0) || std::isinf(r)) {
    return InvalidArgument(who + ": --request-rate: '" + text + "' is not a positive number or 'inf'");
  }
  return r;
}

}  // namespace

void AddWorkloadFlags(CLI::App* cmd, WorkloadFlags* f) {
  cmd->add_option("--dataset", f->dataset, "tessera-bench's workloads: random, shared-prefix, burstgpt")
      ->check(CLI::IsMember({"random", "shared-prefix", "burstgpt"}))
      ->capture_default_str()
      ->group("Workload");
  cmd->add_option("--dataset-path", f->dataset_path, "burstgpt: the BurstGPT CSV")->group("Workload");
  cmd->add_option("--num-prompts", f->num_prompts, "requests (burstgpt: the first N usable rows)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Workload");
  cmd->add_option("--input-len", f->input_len, "prompt tokens (after the prefix)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Workload");
  cmd->add_option("--output-len", f->output_len, "output tokens (ignore_eos: every request makes this many)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Workload");
  cmd->add_option("--range-ratio", f->range_ratio, "lengths uniform in [len*(1-r), len*(1+r)]")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0))
      ->group("Workload");
  cmd->add_option("--prefix-len", f->prefix_len, "shared-prefix: tokens of each shared prefix")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Workload");
  cmd->add_option("--num-prefix-groups", f->num_prefix_groups, "shared-prefix: distinct prefixes")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Workload");
  cmd->add_option("--seed", f->seed, "workload and arrival seed")->capture_default_str()->group("Workload");
  cmd->add_option("--request-rate", f->request_rate, "requests/s, Poisson (or gamma with --burstiness); inf: all at 0")
      ->capture_default_str()
      ->group("Workload");
  cmd->add_option("--burstiness", f->burstiness, "gamma shape of the gaps: 1 = Poisson, < 1 burstier, 1e9 = fixed gaps of 1/rate")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Workload");
  cmd->add_option("--time-scale", f->time_scale, "burstgpt: multiply the trace's times")
      ->capture_default_str()
      ->check(CLI::PositiveNumber)
      ->group("Workload");
}

StatusOr<std::vector<sim::TwinRequest>> BuildWorkload(const WorkloadFlags& f, int64_t vocab, const std::string& who) {
  bench::PromptBuilder pb(nullptr);
  std::vector<bench::RequestSpec> specs;
  std::vector<double> offsets;
  if (f.dataset == "burstgpt") {
    if (f.dataset_path.empty()) return InvalidArgument(who + ": --dataset burstgpt needs --dataset-path FILE");
    ASSIGN_OR_RETURN(std::string text, bench::ReadFile(f.dataset_path));
    int64_t skipped = 0;
    ASSIGN_OR_RETURN(std::vector<bench::TraceRow> rows, bench::ParseBurstGptCsv(text, f.dataset_path, &skipped));
    if (static_cast<int64_t>(rows.size()) > f.num_prompts) rows.resize(static_cast<size_t>(f.num_prompts));
    specs = bench::TraceDataset(rows, pb, f.seed);
    std::vector<double> ts;
    for (const bench::TraceRow& r : rows) ts.push_back(r.timestamp);
    ASSIGN_OR_RETURN(offsets, bench::TraceOffsets(ts, f.time_scale));
  } else {
    if (!f.dataset_path.empty()) return InvalidArgument(who + ": --dataset-path is for --dataset burstgpt");
    const bool shared = f.dataset == "shared-prefix";
    specs = bench::RandomDataset({.num = f.num_prompts, .input_len = f.input_len, .output_len = f.output_len,
                                  .range_ratio = f.range_ratio, .prefix_len = shared ? f.prefix_len : 0,
                                  .num_prefix_groups = shared ? f.num_prefix_groups : 1},
                                 pb, f.seed);
    ASSIGN_OR_RETURN(double rate, ParseRate(f.request_rate, who));
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

StatusOr<ModelConfig> ReadModelConfig(const std::string& path) {
  ASSIGN_OR_RETURN(std::string gguf, ResolveGgufPath(path));
  if (gguf.empty()) return LoadModelConfig(path);
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(gguf));
  return GgufModelConfig(file->contents(), gguf);
}

StatusOr<std::string> ModelPathForTwin(const ServeFlags& f) {
  if (!f.model.empty()) return f.model;
  ASSIGN_OR_RETURN(std::string dir, DefaultModelDir(f.default_model_size));
  return std::filesystem::exists(dir) ? dir : std::string();
}

Status CheckModelled(const ServeFlags& f, const std::string& who) {
  auto refuse = [&who](const std::string& what) {
    return InvalidArgument(who + ": " + what + " is not modelled by the twin yet");
  };
  if (f.role != "unified") return refuse("--role " + f.role);
  if (!f.speculative_config.empty()) return refuse("--speculative-config");
  if (f.kv_peer_fetch) return refuse("--kv-peer-fetch");
  if (f.kv_offload_host_gb > 0 || !f.kv_offload_disk_dir.empty() || !f.kv_offload_remote_url.empty()) {
    return refuse("--kv-offload-*");
  }
  if (f.tensor_parallel_size > 1 || f.data_parallel_size > 1) return refuse("-tp/-dp > 1");
  if (f.ttft_slo_ms > 0) return refuse("--ttft-slo-ms (SLO-aware admission)");
  return Status::Ok();
}

StatusOr<SchedulerOptions> SchedulerFromFlags(const ServeFlags& f, const EngineLoopOptions& loop,
                                              const std::string& who, int64_t* kv_bytes_per_token) {
  if (kv_bytes_per_token != nullptr) *kv_bytes_per_token = 0;
  SchedulerOptions so = loop.scheduler;
  ASSIGN_OR_RETURN(std::string model, ModelPathForTwin(f));
  if (model.empty()) {
    if (so.kv.num_blocks <= 0) {
      return InvalidArgument(who + ": --model (its config sizes the KV pool) or --num-kv-blocks is needed "
                             "(the built-in model has not been made yet)");
    }
    if (so.limits.max_model_len <= 0) so.limits.max_model_len = int64_t{so.kv.num_blocks} * so.kv.block_size;
    return so;
  }
  StatusOr<ModelConfig> mc = ReadModelConfig(model);
  if (!mc.ok()) return InvalidArgument(who + ": --model " + model + ": " + mc.status().message());
  const bool auto_len = ApplyModelLimits(*mc, &so);
  // The CPU pool is f32, a GPU's bf16 (engine/backend.h, kv_dtype).
  const int64_t per_token = mc->KvBytesPerToken(f.device == "cpu" ? 4 : 2);
  if (kv_bytes_per_token != nullptr) *kv_bytes_per_token = per_token;
  if (so.kv.num_blocks <= 0) {
    ASSIGN_OR_RETURN(so.kv.num_blocks, NumBlocksForBudget(loop.kv_cache_bytes, per_token, so.kv.block_size));
  }
  CapModelLenAtKvCache(auto_len, &so);
  return so;
}

std::vector<bench::RequestRecord> TwinRecords(const std::vector<sim::TwinRequestResult>& results,
                                              const std::vector<sim::TwinRequest>& requests) {
  std::vector<bench::RequestRecord> records;
  for (size_t i = 0; i < results.size(); ++i) {
    const sim::TwinRequestResult& r = results[i];
    bench::RequestRecord rec;
    rec.sent = true;
    rec.ok = r.ok && !r.token_ns.empty();
    rec.error = r.error;
    rec.send_time = static_cast<double>(r.arrival_ns) / 1e9;
    rec.prompt_tokens = r.prompt_tokens;
    rec.output_tokens = static_cast<int64_t>(r.token_ns.size());
    rec.expected_output_tokens = i < requests.size() ? requests[i].max_tokens : 0;
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
  return records;
}

}  // namespace tessera
