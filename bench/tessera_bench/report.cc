#include "bench/tessera_bench/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace tessera::bench {

namespace {

std::string Fmt(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string Row(const std::string& name, const std::string& value) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%-40s %12s\n", name.c_str(), value.c_str());
  return buf;
}

std::string Header(const std::string& title, char fill) {
  const int width = 53;
  std::string t = title.empty() ? "" : " " + title + " ";
  const int pad = std::max(0, width - static_cast<int>(t.size()));
  return std::string(static_cast<size_t>(pad / 2), fill) + t + std::string(static_cast<size_t>(pad - pad / 2), fill) + "\n";
}

void StatRows(std::ostringstream& o, const char* name, const char* unit, const Stats& s) {
  o << Header(name, '-');
  o << Row(std::string("Mean ") + unit + " (ms):", Fmt("%.2f", s.mean));
  o << Row(std::string("Median ") + unit + " (ms):", Fmt("%.2f", s.median));
  o << Row(std::string("P90 ") + unit + " (ms):", Fmt("%.2f", s.p90));
  o << Row(std::string("P99 ") + unit + " (ms):", Fmt("%.2f", s.p99));
}

}  // namespace

std::string FormatSummary(const Summary& s, const std::string& title) {
  std::ostringstream o;
  o << Header(title.empty() ? "Serving Benchmark Result" : title, '=');
  o << Row("Successful requests:", std::to_string(s.completed));
  o << Row("Failed requests:", std::to_string(s.failed));
  if (s.cancelled) o << Row("Cancelled (--max-duration):", std::to_string(s.cancelled));
  if (s.not_sent) o << Row("Not sent (--max-duration):", std::to_string(s.not_sent));
  o << Row("Benchmark duration (s):", Fmt("%.2f", s.duration_s));
  o << Row("Total input tokens:", std::to_string(s.total_input_tokens));
  o << Row("Total generated tokens:", std::to_string(s.total_output_tokens));
  o << Row("Request throughput (req/s):", Fmt("%.2f", s.request_throughput));
  if (s.goodput) o << Row("Request goodput (req/s):", Fmt("%.2f", *s.goodput));
  o << Row("Output token throughput (tok/s):", Fmt("%.2f", s.output_throughput));
  o << Row("Total token throughput (tok/s):", Fmt("%.2f", s.total_token_throughput));
  StatRows(o, "Time to First Token", "TTFT", s.ttft_ms);
  StatRows(o, "Time per Output Token (excl. 1st token)", "TPOT", s.tpot_ms);
  StatRows(o, "Inter-token Latency", "ITL", s.itl_ms);
  StatRows(o, "End-to-end Latency", "E2EL", s.e2el_ms);
  o << std::string(53, '=') << "\n";
  if (!s.all_usage_reported) o << "note: the server reported no usage for some requests; their token counts are estimates\n";
  for (const auto& e : s.first_errors) o << "error: " << e << "\n";
  return o.str();
}

nlohmann::json StatsJson(const Stats& s) {
  return {{"count", s.count}, {"mean", s.mean}, {"median", s.median}, {"std", s.std}, {"min", s.min},
          {"max", s.max},     {"p90", s.p90},   {"p99", s.p99}};
}

nlohmann::json SummaryJson(const Summary& s) {
  nlohmann::json j = {
      {"duration_s", s.duration_s},
      {"num_requests", s.num_requests},
      {"completed", s.completed},
      {"failed", s.failed},
      {"cancelled", s.cancelled},
      {"not_sent", s.not_sent},
      {"errors", s.first_errors},
      {"total_input_tokens", s.total_input_tokens},
      {"total_output_tokens", s.total_output_tokens},
      {"request_throughput", s.request_throughput},
      {"input_throughput", s.input_throughput},
      {"output_throughput", s.output_throughput},
      {"total_token_throughput", s.total_token_throughput},
      {"usage_reported", s.all_usage_reported},
      {"ttft_ms", StatsJson(s.ttft_ms)},
      {"tpot_ms", StatsJson(s.tpot_ms)},
      {"itl_ms", StatsJson(s.itl_ms)},
      {"e2el_ms", StatsJson(s.e2el_ms)},
  };
  j["goodput"] = s.goodput ? nlohmann::json(*s.goodput) : nlohmann::json(nullptr);
  j["good_requests"] = s.good_requests;
  return j;
}

nlohmann::json RecordJson(const RequestRecord& r) {
  nlohmann::json j = {{"sent", r.sent},
                      {"ok", r.ok},
                      {"send_time_s", r.send_time},
                      {"prompt_tokens", r.prompt_tokens},
                      {"output_tokens", r.output_tokens},
                      {"max_tokens", r.expected_output_tokens}};
  if (r.ok) {
    j["ttft_ms"] = r.ttft * 1e3;
    j["e2el_ms"] = r.e2e * 1e3;
    auto t = Tpot(r);
    j["tpot_ms"] = t ? nlohmann::json(*t * 1e3) : nlohmann::json(nullptr);
    std::vector<double> itl;
    for (double g : r.itl) itl.push_back(g * 1e3);
    j["itl_ms"] = itl;
  } else if (r.sent) {
    j["error"] = r.error;
    j["cancelled"] = r.cancelled;
    if (r.http_status) j["http_status"] = r.http_status;
  }
  return j;
}

std::string XmlEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default:
        // XML 1.0 forbids most control characters.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') o.push_back(c);
    }
  }
  return o;
}

namespace {

constexpr double kPanelW = 520, kPanelH = 360, kLeft = 70, kRight = 20, kTop = 40, kBottom = 55;

// Round step (1, 2, 5 x 10^k) giving about five ticks over [lo, hi].
double TickStep(double lo, double hi) {
  const double span = hi - lo;
  if (!(span > 0)) return 1;
  const double raw = span / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (raw <= m * mag) return m * mag;
  }
  return 10 * mag;
}

std::string Num(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e7 || a < 1e-3) return Fmt("%.2g", v);
  if (a >= 100) return Fmt("%.0f", v);  // 15000, not 1.5e+04
  return Fmt("%.3g", v);
}

void RenderPanel(std::ostringstream& o, const Panel& p, double ox, double oy) {
  double xmin = 0, xmax = 0, ymin = 0, ymax = 0;
  bool first = true;
  for (const auto& s : p.series) {
    for (auto [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      if (first) {
        xmin = xmax = x;
        ymin = ymax = y;
        first = false;
      }
      xmin = std::min(xmin, x);
      xmax = std::max(xmax, x);
      ymin = std::min(ymin, y);
      ymax = std::max(ymax, y);
    }
  }
  xmin = std::min(xmin, 0.0);  // axes from zero: honest proportions
  ymin = std::min(ymin, 0.0);
  if (xmax <= xmin) xmax = xmin + 1;
  if (ymax <= ymin) ymax = ymin + 1;
  const double xs = TickStep(xmin, xmax), ys = TickStep(ymin, ymax);
  xmax = std::ceil(xmax / xs) * xs;
  ymax = std::ceil(ymax / ys) * ys;
  const double pw = kPanelW - kLeft - kRight, ph = kPanelH - kTop - kBottom;
  auto X = [&](double x) { return ox + kLeft + (x - xmin) / (xmax - xmin) * pw; };
  auto Y = [&](double y) { return oy + kTop + ph - (y - ymin) / (ymax - ymin) * ph; };

  o << "<g>\n<text x=\"" << ox + kPanelW / 2 << "\" y=\"" << oy + 22
    << "\" text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\">" << XmlEscape(p.title) << "</text>\n";
  o << "<rect x=\"" << X(xmin) << "\" y=\"" << Y(ymax) << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (double t = xmin; t <= xmax + xs * 1e-9; t += xs) {
    o << "<line x1=\"" << X(t) << "\" y1=\"" << Y(ymin) << "\" x2=\"" << X(t) << "\" y2=\"" << Y(ymax)
      << "\" stroke=\"#e4e4e4\"/>\n<text x=\"" << X(t) << "\" y=\"" << Y(ymin) + 16
      << "\" text-anchor=\"middle\" font-size=\"11\">" << Num(t) << "</text>\n";
  }
  for (double t = ymin; t <= ymax + ys * 1e-9; t += ys) {
    o << "<line x1=\"" << X(xmin) << "\" y1=\"" << Y(t) << "\" x2=\"" << X(xmax) << "\" y2=\"" << Y(t)
      << "\" stroke=\"#e4e4e4\"/>\n<text x=\"" << X(xmin) - 6 << "\" y=\"" << Y(t) + 4
      << "\" text-anchor=\"end\" font-size=\"11\">" << Num(t) << "</text>\n";
  }
  o << "<text x=\"" << ox + kLeft + pw / 2 << "\" y=\"" << oy + kPanelH - 12
    << "\" text-anchor=\"middle\" font-size=\"12\">" << XmlEscape(p.xlabel) << "</text>\n";
  o << "<text transform=\"translate(" << ox + 16 << "," << oy + kTop + ph / 2
    << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">" << XmlEscape(p.ylabel) << "</text>\n";
  double ly = oy + kTop + 14;
  for (const auto& s : p.series) {
    const std::string color = XmlEscape(s.color);
    if (s.line && s.points.size() > 1) {
      o << "<polyline fill=\"none\" stroke=\"" << color << "\" stroke-width=\"2\" points=\"";
      for (auto [x, y] : s.points) {
        if (std::isfinite(x) && std::isfinite(y)) o << X(x) << "," << Y(y) << " ";
      }
      o << "\"/>\n";
    }
    for (size_t i = 0; i < s.points.size(); ++i) {
      auto [x, y] = s.points[i];
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      if (s.markers) {
        o << "<circle cx=\"" << X(x) << "\" cy=\"" << Y(y) << "\" r=\"3.5\" fill=\"" << color << "\"/>\n";
      }
      if (i < s.labels.size() && !s.labels[i].empty()) {
        o << "<text x=\"" << X(x) + 6 << "\" y=\"" << Y(y) - 6 << "\" font-size=\"10\" fill=\"" << color << "\">"
          << XmlEscape(s.labels[i]) << "</text>\n";
      }
    }
    // Legend.
    o << "<rect x=\"" << X(xmin) + 10 << "\" y=\"" << ly - 9 << "\" width=\"12\" height=\"4\" fill=\"" << color
      << "\"/>\n<text x=\"" << X(xmin) + 28 << "\" y=\"" << ly - 4 << "\" font-size=\"11\">" << XmlEscape(s.name)
      << "</text>\n";
    ly += 15;
  }
  o << "</g>\n";
}

}  // namespace

std::string RenderSvg(const std::vector<Panel>& panels, const std::string& title) {
  const double w = kPanelW * static_cast<double>(std::max<size_t>(panels.size(), 1));
  const double h = kPanelH + 30;
  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\" viewBox=\"0 0 " << w
    << " " << h << "\" font-family=\"sans-serif\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << w / 2 << "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">" << XmlEscape(title)
    << "</text>\n";
  for (size_t i = 0; i < panels.size(); ++i) RenderPanel(o, panels[i], kPanelW * static_cast<double>(i), 30);
  o << "</svg>\n";
  return o.str();
}

std::string SweepSvg(const std::vector<SweepPoint>& points, const std::string& title) {
  std::vector<SweepPoint> sorted = points;
  std::stable_sort(sorted.begin(), sorted.end(), [](const SweepPoint& a, const SweepPoint& b) {
    return a.summary.output_throughput < b.summary.output_throughput;
  });
  auto series = [&](const char* name, const char* color, auto get) {
    Series s{name, color, {}, {}, true, true};
    for (const auto& p : sorted) {
      s.points.emplace_back(p.summary.output_throughput, get(p.summary));
      s.labels.push_back("rate " + p.label);
    }
    return s;
  };
  Panel ttft{"Time to first token", "achieved output tokens/s", "TTFT (ms)", {}};
  ttft.series.push_back(series("median", "#1f77b4", [](const Summary& s) { return s.ttft_ms.median; }));
  ttft.series.push_back(series("p99", "#d62728", [](const Summary& s) { return s.ttft_ms.p99; }));
  Panel tpot{"Time per output token", "achieved output tokens/s", "TPOT (ms)", {}};
  tpot.series.push_back(series("median", "#1f77b4", [](const Summary& s) { return s.tpot_ms.median; }));
  tpot.series.push_back(series("p99", "#d62728", [](const Summary& s) { return s.tpot_ms.p99; }));
  return RenderSvg({ttft, tpot}, title);
}

std::string SingleRunSvg(const std::vector<RequestRecord>& records, const std::string& title) {
  std::vector<double> ttft, e2e;
  Series scatter{"TTFT", "#1f77b4", {}, {}, false, true};
  for (const auto& r : records) {
    if (!r.ok) continue;
    ttft.push_back(r.ttft * 1e3);
    e2e.push_back(r.e2e * 1e3);
    scatter.points.emplace_back(r.send_time, r.ttft * 1e3);
  }
  auto cdf = [](std::vector<double> v, const char* name, const char* color) {
    std::sort(v.begin(), v.end());
    Series s{name, color, {}, {}, true, v.size() <= 64};
    for (size_t i = 0; i < v.size(); ++i) {
      s.points.emplace_back(v[i], static_cast<double>(i + 1) / static_cast<double>(v.size()));
    }
    return s;
  };
  Panel p1{"Latency CDF", "latency (ms)", "fraction of requests", {}};
  p1.series.push_back(cdf(ttft, "TTFT", "#1f77b4"));
  p1.series.push_back(cdf(e2e, "end-to-end", "#d62728"));
  Panel p2{"TTFT by send time", "request sent at (s)", "TTFT (ms)", {scatter}};
  return RenderSvg({p1, p2}, title);
}

}  // namespace tessera::bench
