#include "bench/tessera_bench/agentic.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

namespace tessera::bench {

namespace {

struct Turn {
  double at = 0;
  int64_t conv = 0;
  int64_t index = 0;
};

}  // namespace

std::vector<RequestSpec> AgenticDataset(const AgenticOptions& opt, const PromptBuilder& pb, uint64_t seed,
                                        std::vector<double>* offsets) {
  std::mt19937_64 rng(seed);
  const int64_t min_turns = std::max<int64_t>(opt.min_turns, 1);
  const int64_t max_turns = std::max(opt.max_turns, min_turns);
  // One agent: the same system prompt and tool list open every conversation.
  std::string system = pb.Make(opt.system_len, rng) + "\n\n# Tools\n";
  for (int64_t k = 0; k < opt.num_tools; ++k) {
    system += "\n## tool_" + std::to_string(k) + "\n" + pb.Make(opt.tool_len, rng);
  }
  const int64_t system_tokens = pb.Count(system);

  // conv_msgs[c]: user task, call 0, result 0, call 1, result 1, ... (user and
  // assistant alternating); turn t sends the first 2t messages as history
  // and message 2t as the prompt.
  std::vector<std::vector<std::string>> conv_msgs;
  std::vector<std::vector<int64_t>> conv_counts;  // tokens of each message (counted once)
  std::vector<Turn> turns;
  std::uniform_int_distribution<int64_t> num_turns(min_turns, max_turns);
  std::uniform_real_distribution<double> gap(0.5 * opt.idle_gap_s, 1.5 * opt.idle_gap_s);
  std::uniform_int_distribution<int64_t> pick_tool(0, std::max<int64_t>(opt.num_tools, 1) - 1);
  for (int64_t c = 0; c < opt.conversations; ++c) {
    const int64_t n = num_turns(rng);
    std::vector<std::string> msgs = {"Task: " + pb.Make(opt.input_len, rng)};
    double at = static_cast<double>(c) * opt.stagger_s;
    for (int64_t t = 0; t < n; ++t) {
      turns.push_back({at, c, t});
      at += gap(rng);
      if (t + 1 == n) break;
      const std::string tool = "tool_" + std::to_string(pick_tool(rng));
      msgs.push_back("Calling " + tool + ": " + pb.Make(opt.output_len, rng));
      msgs.push_back("Result of " + tool + ": " + pb.Make(opt.tool_result_len, rng));
    }
    std::vector<int64_t> counts;
    for (const std::string& m : msgs) counts.push_back(pb.Count(m));
    conv_msgs.push_back(std::move(msgs));
    conv_counts.push_back(std::move(counts));
  }
  std::stable_sort(turns.begin(), turns.end(), [](const Turn& a, const Turn& b) { return a.at < b.at; });
  if (opt.max_requests > 0 && static_cast<int64_t>(turns.size()) > opt.max_requests) {
    turns.resize(static_cast<size_t>(opt.max_requests));
  }

  std::vector<RequestSpec> out;
  offsets->clear();
  for (const Turn& turn : turns) {
    const auto& msgs = conv_msgs[static_cast<size_t>(turn.conv)];
    RequestSpec r;
    r.system = system;
    r.group = static_cast<int>(turn.conv);
    r.history.assign(msgs.begin(), msgs.begin() + 2 * turn.index);
    r.prompt = msgs[static_cast<size_t>(2 * turn.index)];
    r.max_tokens = opt.output_len;
    const auto& counts = conv_counts[static_cast<size_t>(turn.conv)];
    r.prompt_tokens = std::accumulate(counts.begin(), counts.begin() + 2 * turn.index + 1, system_tokens);
    out.push_back(std::move(r));
    offsets->push_back(turn.at);
  }
  return out;
}

}  // namespace tessera::bench
