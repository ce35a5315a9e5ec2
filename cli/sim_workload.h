// What `tessera simulate` and `tessera plan` share (docs/architecture.md,
// "Twin"): tessera-bench's workload flags and the twin's requests built from
// them, serve's scheduler options sized from the model's config, and the
// twin's results as tessera-bench's per-request records (so its metrics and
// goodput definition apply unchanged).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/tessera_bench/metrics.h"
#include "cli/serve_flags.h"
#include "common/status.h"
#include "engine/model_config.h"
#include "runtime/engine_loop.h"
#include "runtime/sim/twin.h"

namespace tessera {

struct WorkloadFlags {
  std::string dataset = "random";
  std::string dataset_path;
  int64_t num_prompts = 100;
  int64_t input_len = 128, output_len = 32, prefix_len = 256, num_prefix_groups = 4;
  double range_ratio = 0;
  uint64_t seed = 0;
  std::string request_rate = "inf";
  double burstiness = 1.0;
  double time_scale = 1.0;
};

// tessera-bench's workload options on `cmd` (group "Workload"); `f` outlives the parse.
void AddWorkloadFlags(CLI::App* cmd, WorkloadFlags* f);

// The workload as tessera-bench builds it, each word of its text one token id
// (without a tokenizer tessera-bench's prompts are words of ~1 token each):
// shared prefixes share their ids. `who` prefixes errors.
StatusOr<std::vector<sim::TwinRequest>> BuildWorkload(const WorkloadFlags& f, int64_t vocab, const std::string& who);

// The model's config (config.json, or a GGUF header), without its weights.
StatusOr<ModelConfig> ReadModelConfig(const std::string& path);

// --model, else the built-in model's directory when it exists; "" otherwise.
StatusOr<std::string> ModelPathForTwin(const ServeFlags& f);

// Settings of serve that change what the scheduler does in ways the twin does
// not model yet: refused, naming the flag.
Status CheckModelled(const ServeFlags& f, const std::string& who);

// Scheduler options exactly as `serve` builds them, sized from the model's
// config as the engine loop does (runtime/scheduler_limits.h). Sets
// *kv_bytes_per_token (when given) from the model's config (0: no model).
StatusOr<SchedulerOptions> SchedulerFromFlags(const ServeFlags& f, const EngineLoopOptions& loop,
                                              const std::string& who, int64_t* kv_bytes_per_token = nullptr);

// The twin's results as tessera-bench records a streamed request: a token per chunk.
std::vector<bench::RequestRecord> TwinRecords(const std::vector<sim::TwinRequestResult>& results,
                                              const std::vector<sim::TwinRequest>& requests);

}  // namespace tessera
