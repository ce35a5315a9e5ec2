// The agentic dataset (--dataset agentic): the traffic of a coding agent or
// an agent framework. Every conversation opens with the same long system
// prompt and tool list, then runs 20-40 turns: a user task, then assistant
// turns that call a tool, each answered by a tool result, the next request
// re-sending the whole conversation so far (prefixes grow turn after turn).
// Between a conversation's turns it sits idle (the tool runs, the human
// reads), long enough, with many conversations, that the device pool cannot
// keep every conversation's prefix: what prefix retention and the KV tiers are
// for.
//
// Tool calls and results travel as plain assistant and user messages (named
// in their text), so any chat template and any server replays them; the
// tool list is text in the system prompt. Arrival times are part of the
// dataset (like a trace): conversation c starts at c * stagger_s, and turn
// t + 1 arrives an idle gap after turn t's arrival (uniform in [0.5, 1.5] x
// idle_gap_s), independent of when turn t's answer came back. Everything is
// deterministic for a seed.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/tessera_bench/dataset.h"

namespace tessera::bench {

struct AgenticOptions {
  int64_t conversations = 8;
  int64_t min_turns = 20;  // requests per conversation, uniform in [min_turns, max_turns]
  int64_t max_turns = 40;
  int64_t system_len = 2048;      // system prompt tokens, before the tool list
  int64_t num_tools = 16;         // tools described in the system prompt
  int64_t tool_len = 48;          // tokens of each tool's description
  int64_t input_len = 128;        // the user's task (first turn)
  int64_t tool_result_len = 256;  // each tool result (every later turn)
  int64_t output_len = 32;        // each assistant turn (max_tokens)
  double idle_gap_s = 4.0;        // mean seconds between a conversation's turns
  double stagger_s = 0.25;        // seconds between conversations' first turns
  int64_t max_requests = 0;       // 0: every turn; else the first max_requests by arrival
};

// Requests in arrival order; (*offsets)[i] is request i's arrival in seconds
// from the start.
std::vector<RequestSpec> AgenticDataset(const AgenticOptions& opt, const PromptBuilder& pb, uint64_t seed,
                                        std::vector<double>* offsets);

}  // namespace tessera::bench
