// What each benchmark request asks for: prompt text (and an optional shared
// system prompt for chat), its length in tokens, and max_tokens.
//
// Datasets: random prompts of given lengths, shared-prefix groups, ShareGPT
// JSON, and the request/response token counts of a BurstGPT CSV trace.
// Prompt text comes from a PromptBuilder: with a tokenizer, random token ids
// decoded and re-encoded to an exact length; without one, random common
// English words (~1 token each; the server's usage then gives real counts).
// Everything is deterministic for a seed. Parsers reject bad input with an
// error naming the entry (ShareGPT) or line and column (CSV).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tessera::text {
class Tokenizer;
}

namespace tessera::bench {

struct RequestSpec {
  std::string system;  // shared prefix: chat system message / completions text prefix
  std::string prompt;  // user message / completion prompt (after `system`)
  int64_t prompt_tokens = 0;  // exact with a tokenizer, an estimate otherwise
  int64_t max_tokens = 1;
  int group = -1;       // shared-prefix group, -1 if none
  // multi-turn: earlier turns of the conversation, user and assistant text
  // alternating, sent before `prompt` (chat: as messages).
  std::vector<std::string> history;
};

class PromptBuilder {
 public:
  // `tokenizer` may be null (word prompts).
  explicit PromptBuilder(std::shared_ptr<const text::Tokenizer> tokenizer);
  // Text of about `tokens` tokens (exactly, re-encoded, with a tokenizer).
  std::string Make(int64_t tokens, std::mt19937_64& rng) const;
  // Token count of `text`: exact with a tokenizer, else an estimate.
  int64_t Count(std::string_view text) const;
  bool exact() const { return tokenizer_ != nullptr; }

 private:
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  std::vector<int32_t> ordinary_ids_;  // ids that decode to ordinary text
};

// Uniform integer in [len*(1-r), len*(1+r)] (at least 1), like vLLM's --range-ratio.
int64_t SampleLength(int64_t len, double range_ratio, std::mt19937_64& rng);

struct RandomOptions {
  int64_t num = 100;
  int64_t input_len = 128;
  int64_t output_len = 32;
  double range_ratio = 0.0;
  int64_t prefix_len = 0;         // shared prefix tokens (0: none)
  int64_t num_prefix_groups = 1;  // distinct shared prefixes
};
std::vector<RequestSpec> RandomDataset(const RandomOptions& opt, const PromptBuilder& pb, uint64_t seed);

// Multi-turn chat replay: `num` requests from ceil(num / turns) conversations
// of `turns` user turns each (input_len tokens; assistant replies of
// output_len tokens, synthetic, replayed as history). Each conversation opens
// with one of num_prefix_groups shared system prompts of prefix_len tokens
// (0: none). Ordered turn by turn (every conversation's turn 1, then turn 2,
// ...), so a turn's history was sent as an earlier request: the workload of a
// chat service whose requests re-send the growing conversation.
struct MultiTurnOptions {
  int64_t num = 100;
  int64_t turns = 4;
  int64_t input_len = 64;
  int64_t output_len = 32;
  int64_t prefix_len = 0;
  int64_t num_prefix_groups = 1;
};
std::vector<RequestSpec> MultiTurnDataset(const MultiTurnOptions& opt, const PromptBuilder& pb, uint64_t seed);

// ShareGPT: [{"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}, ...]
struct Conversation {
  std::string prompt;      // first human turn
  std::string completion;  // the gpt turn after it
};
// Entries without a human turn followed by a gpt turn are skipped (counted in *skipped).
StatusOr<std::vector<Conversation>> ParseShareGpt(std::string_view json, const std::string& name,
                                                  int64_t* skipped);
// `num` conversations in a seeded random order; max_tokens = the reply's
// length (or output_len_override if > 0).
std::vector<RequestSpec> ShareGptDataset(const std::vector<Conversation>& convs, int64_t num,
                                         int64_t output_len_override, const PromptBuilder& pb,
                                         uint64_t seed);

// BurstGPT CSV: Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
struct TraceRow {
  double timestamp = 0;
  int64_t request_tokens = 0;
  int64_t response_tokens = 0;
};
// Rows with 0 response tokens (failed requests) or 0 request tokens are skipped
// (counted in *skipped).
StatusOr<std::vector<TraceRow>> ParseBurstGptCsv(std::string_view csv, const std::string& name,
                                                 int64_t* skipped);
std::vector<RequestSpec> TraceDataset(const std::vector<TraceRow>& rows, const PromptBuilder& pb,
                                      uint64_t seed);

StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace tessera::bench
