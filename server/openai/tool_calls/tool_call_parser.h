// Tool-call parsers: split a model's output text into the text outside tool
// calls and the calls themselves, in the model family's own format. The names
// are vLLM's --tool-call-parser names:
//   hermes       Hermes / Qwen2.5 / Qwen3: <tool_call>{"name":..,"arguments":{..}}</tool_call>, repeated
//   llama3_json  Llama 3.x: the output is [<|python_tag|>]{"name":..,"parameters":{..}} [; {...}]
//   mistral      [TOOL_CALLS][{"name":..,"arguments":{..}}, ...]  or  [TOOL_CALLS]name[ARGS]{..}
//   deepseek_v3  DeepSeek-V3/R1 (deepseek_v3_parser.h)
//   openai       gpt-oss's harmony format: see harmony_parser.h
// plus the two formats the server asks for itself under tool_choice
// "required" / a named function (see tool_choice.h).
//
// Incremental: Feed() the output as it is generated, Finish() at its end; a
// non-streamed response feeds everything at once, so both paths give the same
// result. A call is released whole once it is complete and valid (its
// arguments then go out in one fragment); a malformed or unfinished call is
// released as content, verbatim. Text that may be the start of a call's
// markup is held back, so partial markup never reaches the client as content.
// Whitespace that only separates calls from each other or from the text is
// dropped. One instance per generated choice; not thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "server/openai/tool_calls/scan.h"

namespace tessera::text {
class ChatTemplate;
}

namespace tessera::openai::tools {

// kOpenAI is the harmony format, read by HarmonyParser (harmony_parser.h),
// not by a ToolCallParser.
enum class ToolParserKind { kNone, kHermes, kLlama3Json, kMistral, kOpenAI, kDeepSeekV3 };

// "hermes" | "llama3_json" | "mistral" | "openai" | "deepseek_v3" (vLLM's
// names); INVALID_ARGUMENT otherwise.
StatusOr<ToolParserKind> ToolParserFromName(std::string_view name);
std::string_view ToolParserName(ToolParserKind kind);  // "" for kNone
// The format a chat template teaches the model: "<tool_call>" -> hermes,
// "[TOOL_CALLS]" -> mistral, Llama 3.1's "<|python_tag|>" or its "respond with
// a JSON for a function call" prompt -> llama3_json, "<|channel|>" -> openai
// (harmony), DeepSeek's "<｜tool▁calls▁begin｜>" -> deepseek_v3; kNone if none.
ToolParserKind DetectToolParser(const text::ChatTemplate& chat_template);

// What a parser releases.
struct ParsedText {
  std::string content;
  std::vector<ToolCall> calls;
};

class ToolCallParser {
 public:
  virtual ~ToolCallParser() = default;
  // Appends to `out` what `text` (the next piece of output) lets it release.
  virtual void Feed(std::string_view text, ParsedText* out) = 0;
  // End of output: releases everything still held.
  virtual void Finish(ParsedText* out) = 0;
};

// Null for kNone and kOpenAI (harmony_parser.h).
std::unique_ptr<ToolCallParser> MakeToolCallParser(ToolParserKind kind);

// tool_choice "required": the output is a JSON array of {"name", "parameters"}.
std::unique_ptr<ToolCallParser> MakeRequiredToolCallParser();
// A named function: the output is that function's arguments object.
std::unique_ptr<ToolCallParser> MakeNamedToolCallParser(std::string function_name);

// Text and calls in output order, with the whitespace rule above. Shared by
// the parsers (and usable by new ones).
class CallTextSink {
 public:
  void Text(std::string_view text, ParsedText* out);
  void Call(ToolCall call, ParsedText* out);
  void Finish(ParsedText* out);

 private:
  std::string held_space_;  // trailing whitespace not yet known to touch a call
  bool after_call_ = false; // the last thing released was a call
};

// A parser that holds unreleased output in buf_ and re-scans it: Feed appends
// and runs Run(final=false); Finish runs Run(final=true), lets ReleaseHeld
// release what is still held (as text, or a call complete at the end), then
// closes the sink.
class RescanningToolCallParser : public ToolCallParser {
 public:
  void Feed(std::string_view text, ParsedText* out) final;
  void Finish(ParsedText* out) final;

 protected:
  virtual void Run(bool final, ParsedText* out) = 0;
  // End of output, after the final Run: releases buf_ (cleared afterwards) and resets the state.
  virtual void ReleaseHeld(ParsedText* out) = 0;

  std::string buf_;  // output not yet released
  CallTextSink sink_;
};

}  // namespace tessera::openai::tools
