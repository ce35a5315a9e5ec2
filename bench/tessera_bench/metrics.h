// Per-request records and the serving metrics computed from them: TTFT, TPOT,
// ITL, end-to-end latency (mean/median/std/min/max/p90/p99), throughputs, and
// goodput under SLOs (DistServe: requests per second meeting every bound).
// Pure functions over plain data; no clocks or I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::bench {

// One request as measured. Times in seconds.
struct RequestRecord {
  bool sent = false;       // false: never issued (--max-duration ended the run first)
  bool ok = false;         // completed normally
  bool cancelled = false;  // cut by --max-duration
  std::string error;       // why it failed ("" when ok)
  int http_status = 0;
  double send_time = 0;    // seconds since the run started
  double ttft = 0;         // to the first content chunk
  double e2e = 0;          // to the end of the response
  std::vector<double> itl; // gaps between content chunks
  int64_t prompt_tokens = 0;   // server usage if reported, else the dataset's count
  int64_t output_tokens = 0;   // server usage if reported, else content chunks
  int64_t expected_output_tokens = 0;  // max_tokens asked for
  bool usage_reported = false;
};

// TPOT of a request: (e2e - ttft) / (output_tokens - 1); nullopt if < 2 tokens.
std::optional<double> Tpot(const RequestRecord& r);

// Linear interpolation between closest ranks (NumPy's default); q in [0, 100].
// `sorted` ascending and non-empty.
double Percentile(const std::vector<double>& sorted, double q);

struct Stats {
  int64_t count = 0;
  double mean = 0, median = 0, std = 0, min = 0, max = 0, p90 = 0, p99 = 0;
};
// All zero (count 0) for no values. std is the population standard deviation.
Stats ComputeStats(std::vector<double> values);

// Service-level objectives in milliseconds; unset bounds are not checked.
struct Slo {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool any() const { return ttft_ms || tpot_ms || e2el_ms; }
};
// "ttft:500", "tpot:50", "e2el:2000" (vLLM's --goodput syntax).
StatusOr<Slo> ParseSlo(const std::vector<std::string>& items);
bool MeetsSlo(const RequestRecord& r, const Slo& slo);

struct Summary {
  double duration_s = 0;
  int64_t num_requests = 0, completed = 0, failed = 0, cancelled = 0, not_sent = 0;
  std::vector<std::string> first_errors;  // up to 5 distinct messages
  int64_t total_input_tokens = 0, total_output_tokens = 0;
  double request_throughput = 0, input_throughput = 0, output_throughput = 0, total_token_throughput = 0;
  std::optional<double> goodput;  // requests/s meeting the SLOs (when any is set)
  int64_t good_requests = 0;
  Stats ttft_ms, tpot_ms, itl_ms, e2el_ms;
  bool all_usage_reported = true;
};
// Only completed requests enter latency and token figures.
Summary Summarize(const std::vector<RequestRecord>& records, double duration_s, const Slo& slo);

}  // namespace tessera::bench
