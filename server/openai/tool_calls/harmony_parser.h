// The harmony format (gpt-oss, vLLM's `--tool-call-parser openai` and
// `--reasoning-parser openai_gptoss`): the output is a sequence of messages
//   <|start|>ROLE[ to=RECIPIENT][<|channel|>CHANNEL[ to=RECIPIENT]][ TYPE|<|constrain|>TYPE]<|message|>BODY END
// with END one of <|end|>, <|call|>, <|return|> (the first message's
// `<|start|>assistant` is the generation prompt, so the output usually begins
// at `<|channel|>`). Each message body goes to one place:
//   channel analysis                         -> reasoning_content
//   recipient functions.NAME (tools parsed)  -> one tool call, the body its JSON arguments
//   any other recipient (browser., python),
//   a function call while tools are not parsed,
//   a role other than assistant              -> content, verbatim (markup included)
//   final, commentary without recipient, ... -> content (the body only)
// Text outside any message is content verbatim. A call whose body is not a
// JSON object is content verbatim too. Bodies are kept exactly (no trimming).
//
// Needs the output with special tokens kept (the server then detokenizes
// without skip_special_tokens). Incremental: Feed() as generated, Finish() at
// the end; bytes that may begin a special token are held back while
// streaming, reasoning and content bodies stream as they come, a call is
// released when its body ends (or at Finish if the body is a complete JSON
// object: generation stops on <|call|>, which may not reach the text). The
// concatenated releases equal the whole-text parse at every split point.
// One instance per generated choice; not thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "server/openai/tool_calls/tool_call_parser.h"

namespace tessera::openai::tools {

// The rendered prompt's open message, which the output continues: the text
// from the prompt's last `<|start|>` when no end token follows it, cut after
// its `<|message|>` if it has one (a body already in the prompt, as under
// continue_final_message, is not output); "" when the prompt ends between
// messages (the output then starts outside any message). Linear in the prompt.
std::string HarmonyOpenHeader(std::string_view prompt);

// The special tokens the format is made of (o200k_harmony's names).
inline constexpr std::string_view kHarmonyStart = "<|start|>";
inline constexpr std::string_view kHarmonyMessage = "<|message|>";
inline constexpr std::string_view kHarmonyChannel = "<|channel|>";
inline constexpr std::string_view kHarmonyReturn = "<|return|>";
inline constexpr std::string_view kHarmonyCall = "<|call|>";

// What one Feed/Finish releases: reasoning, content and the calls (in output
// order within each kind).
struct HarmonyOutput {
  std::string reasoning;
  ParsedText text;
};

class HarmonyParser {
 public:
  // `open_header` is HarmonyOpenHeader(prompt); `parse_tools` false turns
  // function calls into verbatim content.
  HarmonyParser(std::string_view open_header, bool parse_tools);
  void Feed(std::string_view text, HarmonyOutput* out);
  void Finish(HarmonyOutput* out);

 private:
  enum class State { kOutside, kHeader, kBody };
  enum class Route { kReasoning, kContent, kCall, kVerbatim };
  void Run(bool final, HarmonyOutput* out);
  // Decides the route of the message whose header is header_.
  void OpenBody();
  // Ends the current message with its remaining `body`; `end` is the end
  // token (empty at Finish or when the next <|start|> cut it short).
  void CloseBody(std::string_view body, std::string_view end, HarmonyOutput* out);
  void Reset();  // back outside any message
  void Emit(std::string_view body, HarmonyOutput* out);

  bool parse_tools_;
  State state_ = State::kOutside;
  Route route_ = Route::kContent;
  std::string buf_;          // output not yet released
  std::string header_;       // the open message's header (after <|start|>)
  size_t search_from_ = 0;   // kHeader / kCall: where the terminator search resumes in buf_
  std::string call_name_;    // kCall: the function's name
  std::string markup_;       // the open message's markup that came from the output (verbatim routes)
};

}  // namespace tessera::openai::tools
