// Output of a benchmark: the human summary table (vLLM's layout), the JSON
// document, and self-contained SVG charts (hand-written SVG text, no scripts
// or external assets): a latency-throughput curve for a rate sweep, latency
// CDFs and a TTFT-over-time scatter for a single run.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/tessera_bench/metrics.h"

namespace tessera::bench {

std::string FormatSummary(const Summary& s, const std::string& title);

nlohmann::json StatsJson(const Stats& s);
nlohmann::json SummaryJson(const Summary& s);
nlohmann::json RecordJson(const RequestRecord& r);

// One run of a sweep, as plotted.
struct SweepPoint {
  std::string label;  // the request rate ("2", "inf")
  Summary summary;
};
std::string SweepSvg(const std::vector<SweepPoint>& points, const std::string& title);
std::string SingleRunSvg(const std::vector<RequestRecord>& records, const std::string& title);

// A chart panel, exposed for tests.
struct Series {
  std::string name;
  std::string color;
  std::vector<std::pair<double, double>> points;
  std::vector<std::string> labels;  // per point, may be empty
  bool line = true;
  bool markers = true;
};
struct Panel {
  std::string title, xlabel, ylabel;
  std::vector<Series> series;
};
// Panels side by side in one <svg> document.
std::string RenderSvg(const std::vector<Panel>& panels, const std::string& title);

std::string XmlEscape(const std::string& s);

}  // namespace tessera::bench
