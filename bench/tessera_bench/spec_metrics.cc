#include "bench/tessera_bench/spec_metrics.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace tessera::bench {

std::optional<SpecDecodeCounts> ParseSpecDecodeCounts(std::string_view text) {
  SpecDecodeCounts c;
  bool any = false;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string prefix = line.substr(0, colon);
    if (prefix != "tessera" && prefix != "vllm") continue;
    size_t name_end = line.find_first_of("{ ", colon);
    if (name_end == std::string::npos) continue;
    std::string name = line.substr(colon + 1, name_end - colon - 1);
    if (name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0) name.resize(name.size() - 6);
    std::string labels;
    size_t value_at = name_end;
    if (line[name_end] == '{') {
      const size_t close = line.find('}', name_end);
      if (close == std::string::npos) continue;
      labels = line.substr(name_end + 1, close - name_end - 1);
      value_at = close + 1;
    }
    const double v = std::strtod(line.c_str() + value_at, nullptr);
    if (name == "spec_decode_num_drafts") {
      c.drafts += v;
    } else if (name == "spec_decode_num_draft_tokens") {
      c.draft_tokens += v;
    } else if (name == "spec_decode_num_accepted_tokens") {
      c.accepted_tokens += v;
    } else if (name == "spec_decode_num_accepted_tokens_per_pos") {
      const size_t p = labels.find("position=\"");
      if (p == std::string::npos) continue;
      const long pos = std::strtol(labels.c_str() + p + 10, nullptr, 10);
      if (pos < 0 || pos > 1024) continue;
      if (c.accepted_per_pos.size() <= static_cast<size_t>(pos)) c.accepted_per_pos.resize(static_cast<size_t>(pos) + 1);
      c.accepted_per_pos[static_cast<size_t>(pos)] += v;
    } else {
      continue;
    }
    any = true;
  }
  if (!any) return std::nullopt;
  return c;
}

std::optional<SpecDecodeCounts> FetchSpecDecodeCounts(const BaseUrl& base) {
  HttpRequest req;
  req.target = "/metrics";
  auto resp = SendHttp(base, req, nullptr, nullptr);
  if (!resp.ok() || resp->status != 200) return std::nullopt;
  return ParseSpecDecodeCounts(resp->body);
}

std::optional<SpecDecodeStats> SpecDecodeDelta(const SpecDecodeCounts& a, const SpecDecodeCounts& b) {
  SpecDecodeStats s;
  s.drafts = b.drafts - a.drafts;
  s.draft_tokens = b.draft_tokens - a.draft_tokens;
  s.accepted_tokens = b.accepted_tokens - a.accepted_tokens;
  if (!(s.drafts > 0)) return std::nullopt;
  s.acceptance_rate = s.draft_tokens > 0 ? s.accepted_tokens / s.draft_tokens : 0.0;
  s.acceptance_length = 1.0 + s.accepted_tokens / s.drafts;
  for (size_t i = 0; i < b.accepted_per_pos.size(); ++i) {
    const double before = i < a.accepted_per_pos.size() ? a.accepted_per_pos[i] : 0.0;
    s.per_position_rate.push_back((b.accepted_per_pos[i] - before) / s.drafts);
  }
  return s;
}

std::string FormatSpecDecode(const SpecDecodeStats& s) {
  std::string o = "---------------Speculative Decoding----------------\n";
  auto row = [&](const std::string& name, double v, const char* fmt) {
    char val[64], line[256];
    std::snprintf(val, sizeof val, fmt, v);
    std::snprintf(line, sizeof line, "%-40s %12s\n", name.c_str(), val);
    o += line;
  };
  row("Acceptance rate (%):", s.acceptance_rate * 100.0, "%.2f");
  row("Acceptance length:", s.acceptance_length, "%.2f");
  row("Drafts:", s.drafts, "%.0f");
  row("Draft tokens:", s.draft_tokens, "%.0f");
  row("Accepted tokens:", s.accepted_tokens, "%.0f");
  o += "Per-position acceptance (%):\n";
  for (size_t i = 0; i < s.per_position_rate.size(); ++i) {
    row("  Position " + std::to_string(i) + ":", s.per_position_rate[i] * 100.0, "%.2f");
  }
  o += std::string(53, '=') + "\n";
  return o;
}

nlohmann::json SpecDecodeJson(const SpecDecodeStats& s) {
  return {{"num_drafts", s.drafts},
          {"num_draft_tokens", s.draft_tokens},
          {"num_accepted_tokens", s.accepted_tokens},
          {"acceptance_rate", s.acceptance_rate},
          {"acceptance_length", s.acceptance_length},
          {"per_position_acceptance_rate", s.per_position_rate}};
}

}  // namespace tessera::bench
