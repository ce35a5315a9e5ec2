#include "bench/tessera_bench/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace tessera::bench {

std::optional<double> Tpot(const RequestRecord& r) {
  if (r.output_tokens < 2) return std::nullopt;
  return (r.e2e - r.ttft) / static_cast<double>(r.output_tokens - 1);
}

double Percentile(const std::vector<double>& sorted, double q) {
  const double k = (static_cast<double>(sorted.size()) - 1.0) * q / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(k));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (k - static_cast<double>(lo));
}

Stats ComputeStats(std::vector<double> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.count = static_cast<int64_t>(v.size());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(ss / static_cast<double>(v.size()));
  s.min = v.front();
  s.max = v.back();
  s.median = Percentile(v, 50);
  s.p90 = Percentile(v, 90);
  s.p99 = Percentile(v, 99);
  return s;
}

StatusOr<Slo> ParseSlo(const std::vector<std::string>& items) {
  Slo slo;
  for (const auto& item : items) {
    auto colon = item.find(':');
    if (colon == std::string::npos) {
      return InvalidArgument("--goodput: expected KEY:MS (ttft, tpot or e2el), got '" + item + "'");
    }
    const std::string key = item.substr(0, colon), val = item.substr(colon + 1);
    char* end = nullptr;
    const double ms = std::strtod(val.c_str(), &end);
    if (val.empty() || end != val.c_str() + val.size() || !(ms > 0) || std::isinf(ms)) {
      return InvalidArgument("--goodput " + key + ": '" + val + "' is not a positive number of milliseconds");
    }
    if (key == "ttft") {
      slo.ttft_ms = ms;
    } else if (key == "tpot") {
      slo.tpot_ms = ms;
    } else if (key == "e2el") {
      slo.e2el_ms = ms;
    } else {
      return InvalidArgument("--goodput: unknown metric '" + key + "' (use ttft, tpot or e2el)");
    }
  }
  return slo;
}

bool MeetsSlo(const RequestRecord& r, const Slo& slo) {
  if (!r.ok) return false;
  if (slo.ttft_ms && r.ttft * 1e3 > *slo.ttft_ms) return false;
  if (slo.tpot_ms) {
    // A one-token reply has no TPOT: it meets any TPOT bound.
    auto t = Tpot(r);
    if (t && *t * 1e3 > *slo.tpot_ms) return false;
  }
  if (slo.e2el_ms && r.e2e * 1e3 > *slo.e2el_ms) return false;
  return true;
}

Summary Summarize(const std::vector<RequestRecord>& records, double duration_s, const Slo& slo) {
  Summary s;
  s.duration_s = duration_s;
  s.num_requests = static_cast<int64_t>(records.size());
  std::vector<double> ttft, tpot, itl, e2e;
  for (const auto& r : records) {
    if (!r.sent) {
      s.not_sent++;
      continue;
    }
    if (!r.ok) {
      (r.cancelled ? s.cancelled : s.failed)++;
      if (!r.cancelled && s.first_errors.size() < 5 &&
          std::find(s.first_errors.begin(), s.first_errors.end(), r.error) == s.first_errors.end()) {
        s.first_errors.push_back(r.error);
      }
      continue;
    }
    s.completed++;
    s.total_input_tokens += r.prompt_tokens;
    s.total_output_tokens += r.output_tokens;
    if (!r.usage_reported) s.all_usage_reported = false;
    ttft.push_back(r.ttft * 1e3);
    e2e.push_back(r.e2e * 1e3);
    if (auto t = Tpot(r)) tpot.push_back(*t * 1e3);
    for (double g : r.itl) itl.push_back(g * 1e3);
    if (slo.any() && MeetsSlo(r, slo)) s.good_requests++;
  }
  if (duration_s > 0) {
    s.request_throughput = static_cast<double>(s.completed) / duration_s;
    s.input_throughput = static_cast<double>(s.total_input_tokens) / duration_s;
    s.output_throughput = static_cast<double>(s.total_output_tokens) / duration_s;
    s.total_token_throughput = s.input_throughput + s.output_throughput;
    if (slo.any()) s.goodput = static_cast<double>(s.good_requests) / duration_s;
  } else if (slo.any()) {
    s.goodput = 0.0;
  }
  s.ttft_ms = ComputeStats(std::move(ttft));
  s.tpot_ms = ComputeStats(std::move(tpot));
  s.itl_ms = ComputeStats(std::move(itl));
  s.e2el_ms = ComputeStats(std::move(e2e));
  return s;
}

}  // namespace tessera::bench
