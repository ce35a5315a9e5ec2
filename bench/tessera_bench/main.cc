// tessera-bench: a load generator for OpenAI-compatible servers (Tessera,
// vLLM, SGLang, llama-server, ...), in the spirit of vLLM's benchmark_serving.
//
//   tessera-bench --base-url http://127.0.0.1:8000 --endpoint /v1/completions
//       --dataset random --input-len 128 --output-len 32 --num-prompts 64
//       --max-concurrency 4 --result-json bench.json --svg bench.svg
//
// Streams every request (SSE) and measures TTFT, TPOT, ITL and end-to-end
// latency per request; prints vLLM's summary table; writes JSON and SVG.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <limits>
#include <sstream>

#include <CLI/CLI.hpp>

#include "bench/tessera_bench/agentic.h"
#include "bench/tessera_bench/arrival.h"
#include "bench/tessera_bench/dataset.h"
#include "bench/tessera_bench/report.h"
#include "bench/tessera_bench/spec_metrics.h"
#include "bench/tessera_bench/runner.h"
#include "text/tokenizer.h"

namespace tessera::bench {
namespace {

struct Flags {
  std::string base_url = "http://127.0.0.1:8000";
  std::string endpoint = "/v1/completions";
  std::string model;
  std::string dataset = "random";
  std::string dataset_path;
  std::string tokenizer_dir;
  int64_t num_prompts = 100;
  int64_t input_len = 128, output_len = 32, prefix_len = 256, num_prefix_groups = 4, sharegpt_output_len = 0;
  int64_t turns = 4;
  AgenticOptions agentic;
  double range_ratio = 0.0;
  std::string request_rate = "inf";
  int sweep = 0;
  double burstiness = 1.0;
  int max_concurrency = 0;
  double time_scale = 1.0;
  uint64_t seed = 0;
  bool ignore_eos = true;
  double temperature = 0.0;
  std::string extra_body;
  std::string api_key;
  double timeout_s = 600;
  double max_duration_s = 0;
  std::vector<std::string> goodput;
  std::string result_json, svg;
  bool per_request = true;
  bool progress = false, no_progress = false;
  bool allow_remote = false;
};

int Fail(const std::string& msg, int code = 2) {
  std::fprintf(stderr, "tessera-bench: error: %s\n", msg.c_str());
  return code;
}

// "0.5,1,inf" -> {0.5, 1, inf}
StatusOr<std::vector<double>> ParseRates(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "inf" || item == "Inf" || item == "INF") {
      out.push_back(std::numeric_limits<double>::infinity());
      continue;
    }
    char* end = nullptr;
    const double r = std::strtod(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !(r > 0) || std::isinf(r)) {
      return InvalidArgument("--request-rate: '" + item + "' is not a positive number or 'inf'");
    }
    out.push_back(r);
  }
  if (out.empty()) return InvalidArgument("--request-rate: empty list");
  return out;
}

std::string RateLabel(double r) {
  if (std::isinf(r)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", r);
  return buf;
}

Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) return Status(StatusCode::kUnavailable, "cannot write '" + path + "'");
  return Status::Ok();
}

std::string UtcNow() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{
      "tessera-bench: load generator for OpenAI-compatible HTTP servers (Tessera, vLLM, SGLang, llama-server).\n"
      "Streams requests (SSE) at a request rate (Poisson or gamma-bursty), a fixed concurrency, or a BurstGPT\n"
      "trace's timing; reports TTFT, TPOT, ITL, end-to-end latency, throughput and goodput.\n"
      "Example: tessera-bench --base-url http://127.0.0.1:8000 --dataset random --input-len 128 --output-len 32 \\\n"
      "           --num-prompts 64 --max-concurrency 4 --result-json bench.json --svg bench.svg"};
  app.option_defaults()->always_capture_default();
  app.get_formatter()->column_width(34);
  // Target.
  app.add_option("--base-url", f.base_url, "server address: http://HOST:PORT[/PREFIX]")->group("Target");
  app.add_option("--endpoint", f.endpoint, "/v1/completions or /v1/chat/completions")
      ->check(CLI::IsMember({"/v1/completions", "/v1/chat/completions"}))
      ->group("Target");
  app.add_option("--model", f.model, "model id to request (default: the first id from GET /v1/models)")
      ->group("Target");
  app.add_option("--api-key", f.api_key, "sent as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY)")
      ->group("Target");
  app.add_flag("--allow-remote", f.allow_remote, "allow a host that is not a loopback address")->group("Target");
  // Workload.
  app.add_option("--dataset", f.dataset,
                 "random | shared-prefix | multi-turn (chat replay: --turns, --input-len per user turn, "
                 "--output-len per reply, optional shared system prompt --prefix-len) | agentic (agent sessions: "
                 "--conversations, --min-turns/--max-turns, --idle-gap; system prompt --prefix-len, default "
                 "2048, and --num-tools; task --input-len, tool results --tool-result-len, calls --output-len) | "
                 "sharegpt (JSON, --dataset-path) | burstgpt (CSV trace, --dataset-path)")
      ->check(CLI::IsMember({"random", "shared-prefix", "multi-turn", "agentic", "sharegpt", "burstgpt"}))
      ->group("Workload");
  app.add_option("--dataset-path", f.dataset_path, "ShareGPT JSON or BurstGPT CSV file")->group("Workload");
  app.add_option("--tokenizer", f.tokenizer_dir,
                 "HF directory with tokenizer.json: exact prompt lengths in tokens (default: ~1 token per word)")
      ->group("Workload");
  CLI::Option* num_prompts_opt =
      app.add_option("--num-prompts", f.num_prompts,
                     "requests per run (trace: first N usable rows; agentic: only when given, the first N arrivals)")
      ->check(CLI::Range(int64_t{1}, int64_t{10000000}))
      ->group("Workload");
  app.add_option("--input-len", f.input_len, "prompt tokens (random, shared-prefix: after the prefix)")
      ->check(CLI::Range(int64_t{1}, int64_t{10000000}))
      ->group("Workload");
  app.add_option("--output-len", f.output_len, "max_tokens (random, shared-prefix)")
      ->check(CLI::Range(int64_t{1}, int64_t{10000000}))
      ->group("Workload");
  app.add_option("--range-ratio", f.range_ratio, "lengths uniform in [len*(1-r), len*(1+r)]")
      ->check(CLI::Range(0.0, 1.0))
      ->group("Workload");
  CLI::Option* prefix_len_opt =
      app.add_option("--prefix-len", f.prefix_len,
                     "shared-prefix: tokens of the shared system prompt (multi-turn: only when given)")
      ->check(CLI::Range(int64_t{1}, int64_t{10000000}))
      ->group("Workload");
  app.add_option("--turns", f.turns, "multi-turn: user turns per conversation")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000))
      ->group("Workload");
  app.add_option("--conversations", f.agentic.conversations, "agentic: concurrent agent sessions")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}))
      ->group("Workload");
  app.add_option("--min-turns", f.agentic.min_turns, "agentic: fewest requests per session")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}))
      ->group("Workload");
  app.add_option("--max-turns", f.agentic.max_turns, "agentic: most requests per session")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}))
      ->group("Workload");
  app.add_option("--idle-gap", f.agentic.idle_gap_s,
                 "agentic: mean seconds between a session's turns (uniform in [0.5, 1.5] x this)")
      ->check(CLI::NonNegativeNumber)
      ->group("Workload");
  app.add_option("--num-tools", f.agentic.num_tools, "agentic: tools described in the system prompt")
      ->check(CLI::Range(int64_t{0}, int64_t{1000}))
      ->group("Workload");
  app.add_option("--tool-result-len", f.agentic.tool_result_len, "agentic: tokens of each tool result")
      ->check(CLI::Range(int64_t{1}, int64_t{10000000}))
      ->group("Workload");
  app.add_option("--num-prefix-groups", f.num_prefix_groups, "shared-prefix: distinct prefixes (requests round-robin)")
      ->check(CLI::Range(int64_t{1}, int64_t{1000000}))
      ->group("Workload");
  app.add_option("--sharegpt-output-len", f.sharegpt_output_len, "sharegpt: max_tokens for all (0: the reply's length)")
      ->check(CLI::NonNegativeNumber)
      ->group("Workload");
  app.add_option("--seed", f.seed,
                 "random seed (prompts, lengths, arrivals); the same seed sends the same prompts, which a server's "
                 "prefix cache will hit on a repeat: change it between runs against one server")
      ->group("Workload");
  bool no_ignore_eos = false;
  app.add_flag("--no-ignore-eos", no_ignore_eos,
               "do not send ignore_eos: true (sent by default so every request generates max_tokens; a vLLM/Tessera "
               "extension that other servers may reject)")
      ->group("Workload");
  app.add_option("--temperature", f.temperature, "sampling temperature")->check(CLI::Range(0.0, 2.0))->group("Workload");
  app.add_option("--extra-body", f.extra_body, "JSON object merged into every request body")->group("Workload");
  // Load.
  auto* rate_opt = app.add_option("--request-rate", f.request_rate,
                                  "requests/s; a list (0.5,1,2,inf) runs one benchmark per rate; inf = all at once")
                       ->group("Load");
  app.add_option("--sweep", f.sweep,
                 "N runs: first at rate inf to find the saturation throughput R, then at R*k/N for k=1..N-1")
      ->check(CLI::Range(2, 64))
      ->group("Load");
  app.add_option("--burstiness", f.burstiness, "gamma shape of the inter-arrival times: 1 = Poisson, <1 burstier")
      ->check(CLI::PositiveNumber)
      ->group("Load");
  app.add_option("--max-concurrency", f.max_concurrency,
                 "requests in flight at most (closed loop with rate inf; a cap with a rate); 0 = no cap (up to 1024)")
      ->check(CLI::Range(0, kMaxWorkers))
      ->group("Load");
  app.add_option("--time-scale", f.time_scale, "burstgpt, agentic: multiply arrival times (0.1 = 10x faster)")
      ->check(CLI::PositiveNumber)
      ->group("Load");
  app.add_option("--timeout", f.timeout_s, "seconds per request before it counts as failed")
      ->check(CLI::PositiveNumber)
      ->group("Load");
  app.add_option("--max-duration", f.max_duration_s,
                 "seconds per run; then no new requests are sent and in-flight ones are cancelled (0 = none)")
      ->check(CLI::NonNegativeNumber)
      ->group("Load");
  app.add_option("--goodput", f.goodput, "SLOs for goodput, e.g. ttft:500 tpot:50 e2el:5000 (milliseconds)")
      ->group("Load");
  // Output.
  app.add_option("--result-json", f.result_json, "write config, per-run metrics and per-request records here")
      ->group("Output");
  bool no_per_request = false;
  app.add_flag("--no-per-request", no_per_request, "leave the per-request records out of the JSON")->group("Output");
  app.add_option("--svg", f.svg, "write a chart: latency-throughput curve (several rates) or latency CDFs (one run)")
      ->group("Output");
  app.add_flag("--progress", f.progress, "draw a progress bar on stderr even if it is not a terminal")->group("Output");
  app.add_flag("--no-progress", f.no_progress, "no progress output")->group("Output");
  CLI11_PARSE(app, argc, argv);
  f.ignore_eos = !no_ignore_eos;
  f.per_request = !no_per_request;

  // --- Validate.
  auto base = ParseBaseUrl(f.base_url);
  if (!base.ok()) return Fail(base.status().message());
  if (f.api_key.empty()) {
    if (const char* k = std::getenv("OPENAI_API_KEY")) f.api_key = k;
  }
  auto slo = ParseSlo(f.goodput);
  if (!slo.ok()) return Fail(slo.status().message());
  if (Status s = ValidateExtraBody(f.extra_body); !s.ok()) return Fail(s.message());
  auto rates = ParseRates(f.request_rate);
  if (!rates.ok()) return Fail(rates.status().message());
  const bool agentic = f.dataset == "agentic";
  const bool trace = f.dataset == "burstgpt" || agentic;  // the dataset sets arrival times
  if (trace && (rate_opt->count() > 0 || f.sweep)) {
    return Fail("--request-rate/--sweep cannot be combined with --dataset " + f.dataset +
                " (the dataset sets arrival times)");
  }
  if (f.agentic.min_turns > f.agentic.max_turns) return Fail("--min-turns is larger than --max-turns");
  if (f.sweep && rate_opt->count() > 0) return Fail("give either --sweep or --request-rate, not both");
  const bool from_file = f.dataset == "sharegpt" || f.dataset == "burstgpt";
  if (from_file && f.dataset_path.empty()) {
    return Fail("--dataset " + f.dataset + " needs --dataset-path FILE");
  }
  if (!from_file && !f.dataset_path.empty()) {
    return Fail("--dataset-path is only used with --dataset sharegpt or burstgpt");
  }
  auto loopback = IsLoopbackHost(base->host, base->port);
  if (!loopback.ok()) return Fail(loopback.status().message());
  if (!loopback.value() && !f.allow_remote) {
    return Fail("refusing to send load to '" + base->host +
                "', which is not a loopback address; pass --allow-remote if you mean it");
  }

  // --- Dataset.
  std::shared_ptr<const text::Tokenizer> tokenizer;
  if (!f.tokenizer_dir.empty()) {
    auto t = text::Tokenizer::FromDirectory(f.tokenizer_dir);
    if (!t.ok()) return Fail("--tokenizer: " + t.status().ToString());
    tokenizer = t.value();
  }
  PromptBuilder pb(tokenizer);
  std::vector<RequestSpec> specs;
  std::vector<double> trace_offsets;
  int64_t skipped = 0;
  RandomOptions ro;
  const bool synthetic = f.dataset == "random" || f.dataset == "shared-prefix" || f.dataset == "multi-turn";
  MultiTurnOptions mo;
  if (agentic) {
    f.agentic.system_len = prefix_len_opt->count() > 0 ? f.prefix_len : 2048;
    f.agentic.input_len = f.input_len;
    f.agentic.output_len = f.output_len;
    f.agentic.max_requests = num_prompts_opt->count() > 0 ? f.num_prompts : 0;
    specs = AgenticDataset(f.agentic, pb, f.seed, &trace_offsets);
    for (double& t : trace_offsets) t *= f.time_scale;
  } else if (f.dataset == "multi-turn") {
    mo.num = f.num_prompts;
    mo.turns = f.turns;
    mo.input_len = f.input_len;
    mo.output_len = f.output_len;
    mo.prefix_len = prefix_len_opt->count() > 0 ? f.prefix_len : 0;
    mo.num_prefix_groups = f.num_prefix_groups;
    specs = MultiTurnDataset(mo, pb, f.seed);
  } else if (synthetic) {
    ro.num = f.num_prompts;
    ro.input_len = f.input_len;
    ro.output_len = f.output_len;
    ro.range_ratio = f.range_ratio;
    if (f.dataset == "shared-prefix") {
      ro.prefix_len = f.prefix_len;
      ro.num_prefix_groups = f.num_prefix_groups;
    }
    specs = RandomDataset(ro, pb, f.seed);
  } else {
    auto text = ReadFile(f.dataset_path);
    if (!text.ok()) return Fail("--dataset-path: " + text.status().message());
    if (f.dataset == "sharegpt") {
      auto convs = ParseShareGpt(text.value(), f.dataset_path, &skipped);
      if (!convs.ok()) return Fail(convs.status().message());
      specs = ShareGptDataset(convs.value(), f.num_prompts, f.sharegpt_output_len, pb, f.seed);
    } else {
      auto rows = ParseBurstGptCsv(text.value(), f.dataset_path, &skipped);
      if (!rows.ok()) return Fail(rows.status().message());
      auto& r = rows.value();
      if (static_cast<int64_t>(r.size()) > f.num_prompts) r.resize(static_cast<size_t>(f.num_prompts));
      specs = TraceDataset(r, pb, f.seed);
      std::vector<double> ts;
      for (const auto& row : r) ts.push_back(row.timestamp);
      auto off = TraceOffsets(ts, f.time_scale);
      if (!off.ok()) return Fail(off.status().message());
      trace_offsets = std::move(off.value());
    }
    if (specs.empty()) return Fail(f.dataset_path + ": no usable requests (" + std::to_string(skipped) + " skipped)");
  }
  if (skipped > 0) {
    std::fprintf(stderr, "tessera-bench: skipped %lld %s of %s (%s)\n", static_cast<long long>(skipped),
                 trace ? "rows" : "conversations", f.dataset_path.c_str(),
                 trace ? "0 request or response tokens: failed requests" : "no human turn followed by a gpt turn");
  }

  // --- Target model.
  if (f.model.empty()) {
    auto id = FirstModelId(base.value(), f.api_key);
    if (!id.ok()) return Fail("cannot learn the model id (pass --model): " + id.status().message(), 1);
    f.model = id.value();
  }

  RunConfig cfg;
  cfg.base = base.value();
  cfg.path = base->prefix + f.endpoint;
  cfg.chat = f.endpoint == "/v1/chat/completions";
  cfg.model = f.model;
  cfg.ignore_eos = f.ignore_eos;
  cfg.temperature = f.temperature;
  cfg.extra_body = f.extra_body;
  cfg.api_key = f.api_key;
  cfg.max_concurrency = f.max_concurrency;
  cfg.timeout_s = f.timeout_s;
  cfg.max_duration_s = f.max_duration_s;
  cfg.progress = f.no_progress                         ? ProgressMode::kOff
                 : (f.progress || ::isatty(STDERR_FILENO)) ? ProgressMode::kBar
                                                            : ProgressMode::kLines;

  nlohmann::json config = {{"base_url", f.base_url},
                           {"endpoint", f.endpoint},
                           {"model", f.model},
                           {"dataset", f.dataset},
                           {"dataset_path", f.dataset_path},
                           {"tokenizer", f.tokenizer_dir},
                           {"num_prompts", f.num_prompts},
                           {"num_requests", specs.size()},
                           {"input_len", f.input_len},
                           {"output_len", f.output_len},
                           {"range_ratio", f.range_ratio},
                           {"burstiness", f.burstiness},
                           {"max_concurrency", f.max_concurrency},
                           {"time_scale", f.time_scale},
                           {"seed", f.seed},
                           {"ignore_eos", f.ignore_eos},
                           {"temperature", f.temperature},
                           {"timeout_s", f.timeout_s},
                           {"max_duration_s", f.max_duration_s},
                           {"goodput", f.goodput}};
  if (f.dataset == "shared-prefix") {
    config["prefix_len"] = f.prefix_len;
    config["num_prefix_groups"] = f.num_prefix_groups;
  }
  if (agentic) {
    config["conversations"] = f.agentic.conversations;
    config["min_turns"] = f.agentic.min_turns;
    config["max_turns"] = f.agentic.max_turns;
    config["idle_gap_s"] = f.agentic.idle_gap_s;
    config["prefix_len"] = f.agentic.system_len;
    config["num_tools"] = f.agentic.num_tools;
    config["tool_result_len"] = f.agentic.tool_result_len;
  }
  if (f.dataset == "multi-turn") {
    config["turns"] = f.turns;
    config["prefix_len"] = mo.prefix_len;
    config["num_prefix_groups"] = f.num_prefix_groups;
  }

  // --- Runs.
  std::vector<double> run_rates = trace ? std::vector<double>{0.0} : rates.value();
  if (f.sweep) run_rates = {std::numeric_limits<double>::infinity()};
  nlohmann::json runs = nlohmann::json::array();
  std::vector<SweepPoint> points;
  std::vector<RequestRecord> last_records;
  bool any_completed = false;
  for (size_t k = 0; k < run_rates.size(); ++k) {
    const double rate = run_rates[k];
    const std::string label = trace ? "trace" : RateLabel(rate);
    std::vector<double> offsets =
        trace ? trace_offsets : ArrivalOffsets(rate, f.burstiness, static_cast<int64_t>(specs.size()), f.seed + 1);
    cfg.label = trace ? "trace x" + RateLabel(f.time_scale) : "rate " + label;
    if (cfg.progress != ProgressMode::kOff) {
      std::fprintf(stderr, "tessera-bench: %s, %zu requests, max concurrency %s, model %s, %s\n", cfg.label.c_str(),
                   specs.size(), f.max_concurrency ? std::to_string(f.max_concurrency).c_str() : "none",
                   f.model.c_str(), (base->host + ":" + std::to_string(base->port) + cfg.path).c_str());
    }
    // Fresh random prompts per run (seed + k), so a later rate of a sweep does
    // not hit the server's prefix cache with the earlier runs' prompts.
    if (synthetic && k > 0) {
      specs = f.dataset == "multi-turn" ? MultiTurnDataset(mo, pb, f.seed + k) : RandomDataset(ro, pb, f.seed + k);
    }
    const std::optional<SpecDecodeCounts> spec_before = FetchSpecDecodeCounts(*base);
    RunOutput run = RunBenchmark(cfg, specs, offsets);
    const std::optional<SpecDecodeCounts> spec_after = spec_before ? FetchSpecDecodeCounts(*base) : std::nullopt;
    const std::optional<SpecDecodeStats> spec =
        spec_before && spec_after ? SpecDecodeDelta(*spec_before, *spec_after) : std::nullopt;
    Summary s = Summarize(run.records, run.duration_s, slo.value());
    any_completed = any_completed || s.completed > 0;
    std::string title = trace ? "Serving Benchmark Result (trace x" + RateLabel(f.time_scale) + ")"
                              : "Serving Benchmark Result (rate " + label + ")";
    std::printf("%s", FormatSummary(s, title).c_str());
    if (spec) std::printf("%s", FormatSpecDecode(*spec).c_str());
    std::fflush(stdout);
    nlohmann::json rj = SummaryJson(s);
    rj["spec_decode"] = spec ? SpecDecodeJson(*spec) : nlohmann::json(nullptr);
    rj["request_rate"] = trace ? nlohmann::json("trace") : std::isinf(rate) ? nlohmann::json("inf") : nlohmann::json(rate);
    rj["peak_in_flight"] = run.peak_in_flight;
    if (f.per_request) {
      nlohmann::json reqs = nlohmann::json::array();
      for (const auto& r : run.records) reqs.push_back(RecordJson(r));
      rj["requests"] = std::move(reqs);
    }
    runs.push_back(std::move(rj));
    points.push_back({label, s});
    last_records = std::move(run.records);
    if (f.sweep && k == 0) {  // saturation run: plan the lower rates from its throughput
      const double sat = s.request_throughput;
      if (!(sat > 0)) return Fail("--sweep: the saturation run completed no request", 1);
      for (int i = 1; i < f.sweep; ++i) run_rates.push_back(sat * i / f.sweep);
    }
  }

  if (!f.result_json.empty()) {
    nlohmann::json doc = {{"tool", "tessera-bench"}, {"date", UtcNow()}, {"config", config}, {"runs", runs}};
    if (Status s = WriteText(f.result_json, doc.dump(2) + "\n"); !s.ok()) return Fail(s.message(), 1);
  }
  if (!f.svg.empty()) {
    const std::string title = f.model + " " + f.endpoint + " (" + f.dataset + ", " + std::to_string(specs.size()) +
                              " requests" + (f.max_concurrency ? ", concurrency " + std::to_string(f.max_concurrency) : "") + ")";
    const std::string svg = points.size() > 1 ? SweepSvg(points, title) : SingleRunSvg(last_records, title);
    if (Status s = WriteText(f.svg, svg); !s.ok()) return Fail(s.message(), 1);
  }
  if (!any_completed) return Fail("no request completed", 1);
  return 0;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) { return tessera::bench::Main(argc, argv); }
