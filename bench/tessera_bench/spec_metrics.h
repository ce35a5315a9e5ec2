// Speculative-decoding figures for a run, from the server's Prometheus
// /metrics read before and after it (as vLLM's bench does): the
// spec_decode_num_drafts / num_draft_tokens / num_accepted_tokens /
// num_accepted_tokens_per_pos counters under the "tessera:" or "vllm:" prefix.
// A server without them (speculation off, llama-server) gives no figures.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/tessera_bench/http_client.h"

namespace tessera::bench {

struct SpecDecodeCounts {
  double drafts = 0, draft_tokens = 0, accepted_tokens = 0;
  std::vector<double> accepted_per_pos;  // by position label
};

struct SpecDecodeStats {
  double drafts = 0, draft_tokens = 0, accepted_tokens = 0;
  double acceptance_rate = 0;    // accepted / draft tokens
  double acceptance_length = 0;  // mean tokens per verification: 1 + accepted / drafts
  std::vector<double> per_position_rate;  // accepted at position i / drafts
};

// Sums the counters over their labels; nullopt when the text has none.
std::optional<SpecDecodeCounts> ParseSpecDecodeCounts(std::string_view prometheus_text);
// GET /metrics; nullopt on any failure (the figures are best effort).
std::optional<SpecDecodeCounts> FetchSpecDecodeCounts(const BaseUrl& base);
// after - before; nullopt unless some draft was verified in between.
std::optional<SpecDecodeStats> SpecDecodeDelta(const SpecDecodeCounts& before, const SpecDecodeCounts& after);

nlohmann::json SpecDecodeJson(const SpecDecodeStats& s);
// The summary section, as vLLM's bench prints it.
std::string FormatSpecDecode(const SpecDecodeStats& s);

}  // namespace tessera::bench
