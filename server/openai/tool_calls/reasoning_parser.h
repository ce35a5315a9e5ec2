// Reasoning parsers (vLLM's --reasoning-parser names): split a model's output
// into the reasoning between <think> and </think> (OpenAI-compatible servers
// return it as `reasoning_content`) and the answer after it (`content`).
//   qwen3        reasoning only when the output opens <think> (or the prompt
//                already did, e.g. a template's generation prompt); else all content
//   deepseek_r1  the output starts inside reasoning (R1's template opens
//                <think>); a leading <think> is skipped; all reasoning until </think>
//   openai_gptoss  gpt-oss's harmony analysis channel, read by HarmonyParser
//                (harmony_parser.h), not by this class
// The whitespace right after </think> is dropped; reasoning is kept as written.
// Incremental like the tool-call parsers: a possibly partial tag is held back.
// One instance per generated choice; not thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace tessera::openai::tools {

enum class ReasoningParserKind { kNone, kQwen3, kDeepSeekR1, kOpenAIGptOss };

// "qwen3" | "deepseek_r1" | "openai_gptoss"; INVALID_ARGUMENT otherwise.
StatusOr<ReasoningParserKind> ReasoningParserFromName(std::string_view name);
std::string_view ReasoningParserName(ReasoningParserKind kind);  // "" for kNone

// Whether the rendered prompt ends inside an open <think> block (only
// whitespace after its last "<think>", which is after any "</think>").
bool PromptOpensThink(std::string_view prompt);

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  // kind must be kQwen3 or kDeepSeekR1.
  ReasoningParser(ReasoningParserKind kind, bool prompt_opened_think);
  void Feed(std::string_view text, ReasoningSplit* out);
  void Finish(ReasoningSplit* out);

 private:
  enum class State { kStart, kReasoning, kContent };
  void Run(bool final, ReasoningSplit* out);

  State state_;
  State start_default_;  // where kStart goes when the output does not open <think>
  std::string buf_;
  bool after_close_ = false;  // content so far is only whitespace after </think>
};

}  // namespace tessera::openai::tools
