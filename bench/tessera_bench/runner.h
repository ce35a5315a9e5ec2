// Runs one benchmark: sends each request at its arrival offset (optionally
// capped at --max-concurrency in flight), streams the responses and records
// per-request timings taken with steady_clock at chunk arrival.
//
// Threads: the caller's thread dispatches; one worker thread per in-flight
// request (at most max_concurrency, or min(requests, 1024)); one watchdog
// thread applies the per-request timeout and --max-duration and draws the
// progress display on stderr.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/tessera_bench/dataset.h"
#include "bench/tessera_bench/http_client.h"
#include "bench/tessera_bench/metrics.h"

namespace tessera::bench {

inline constexpr int kMaxWorkers = 1024;

enum class ProgressMode { kOff, kLines, kBar };

struct RunConfig {
  BaseUrl base;
  std::string path;  // base.prefix + endpoint
  bool chat = false;
  std::string model;
  bool ignore_eos = true;
  double temperature = 0.0;
  std::string extra_body;  // JSON object merged into every request body ("" = none)
  std::string api_key;
  int max_concurrency = 0;   // 0: no cap beyond kMaxWorkers
  double timeout_s = 600;    // per request
  double max_duration_s = 0; // 0: none
  ProgressMode progress = ProgressMode::kLines;
  std::string label;         // shown in progress lines ("rate 2")
};

struct RunOutput {
  std::vector<RequestRecord> records;  // one per spec, in spec order
  double duration_s = 0;               // start to the last response (or cancellation)
  int peak_in_flight = 0;
};

// The JSON body of one streaming request (exposed for tests). `extra` must
// be "" or a JSON object (checked by ValidateExtraBody).
std::string BuildRequestBody(const RunConfig& cfg, const RequestSpec& spec);
Status ValidateExtraBody(const std::string& extra);

RunOutput RunBenchmark(const RunConfig& cfg, const std::vector<RequestSpec>& specs,
                       const std::vector<double>& offsets);

// The first model id listed by GET {prefix}/v1/models.
StatusOr<std::string> FirstModelId(const BaseUrl& base, const std::string& api_key);

}  // namespace tessera::bench
