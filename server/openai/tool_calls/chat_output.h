// The parsing a chat completion's text goes through before it becomes an
// assistant message: reasoning split off first (reasoning_parser.h), then
// tool calls parsed out of the rest (tool_call_parser.h); or, for the harmony
// format, both at once (harmony_parser.h). Used by both the
// non-streamed and the streamed response builders, so the two agree.
// One ChatOutputParser per choice; not thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "server/openai/tool_calls/harmony_parser.h"
#include "server/openai/tool_calls/reasoning_parser.h"
#include "server/openai/tool_calls/tool_call_parser.h"
#include "server/openai/tool_calls/tool_choice.h"

namespace tessera::openai::tools {

// The server's configuration (--tool-call-parser / --reasoning-parser, or what
// the chat template implies).
struct ChatOutputConfig {
  ToolParserKind tool_parser = ToolParserKind::kNone;
  ReasoningParserKind reasoning_parser = ReasoningParserKind::kNone;
};

// The server's parsers from its flags (nullopt: not given) and the chat
// template (may be null): the tool-call parser defaults to the format the
// template teaches (DetectToolParser); the harmony format is one parser for
// both, so either flag naming it (or a template teaching it) selects it for
// both. A harmony flag beside a non-harmony one is INVALID_ARGUMENT naming
// both flags.
StatusOr<ChatOutputConfig> ResolveChatOutputConfig(std::optional<ToolParserKind> tool_parser,
                                                   std::optional<ReasoningParserKind> reasoning_parser,
                                                   const text::ChatTemplate* chat_template);

// Whether the output is read as harmony (harmony_parser.h).
bool IsHarmony(ToolParserKind tool_parser, ReasoningParserKind reasoning_parser);

// One request's parsing, decided from the config and the request.
struct ChatOutputOptions {
  // kAuto parses the model's own format with `tool_parser` (kNone: no parsing);
  // kRequired / kNamed parse the format ToolCallGrammar forced (tool_grammar.h);
  // kNone parses nothing.
  ToolChoice tool_choice;
  ToolParserKind tool_parser = ToolParserKind::kNone;
  bool parallel_tool_calls = true;  // false: calls after the first are dropped
  ReasoningParserKind reasoning_parser = ReasoningParserKind::kNone;
  bool prompt_opened_think = false;  // see PromptOpensThink
  std::string harmony_open_header;   // see HarmonyOpenHeader (harmony only)

  bool parses_tools() const;
  bool harmony() const { return IsHarmony(tool_parser, reasoning_parser); }
  bool active() const { return parses_tools() || reasoning_parser != ReasoningParserKind::kNone; }
};

struct IndexedToolCall {
  int index = 0;     // position among the choice's calls (OpenAI's tool_calls[].index)
  std::string id;    // "call_..."
  ToolCall call;
};

struct ChatOutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<IndexedToolCall> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
  void Append(ChatOutputDelta other);
};

// `prefix` + 24 random alphanumerics (thread-safe: a generator per thread).
std::string RandomId(std::string_view prefix);
// "call_" + 24 random alphanumerics.
std::string RandomToolCallId();

class ChatOutputParser {
 public:
  // `make_id` names each call (tests pass a deterministic one).
  explicit ChatOutputParser(const ChatOutputOptions& options,
                            std::function<std::string()> make_id = RandomToolCallId);
  ChatOutputDelta Feed(std::string_view text);
  ChatOutputDelta Finish();
  int num_tool_calls() const { return num_calls_; }
  bool parses_reasoning() const { return reasoning_.has_value() || harmony_.has_value(); }
  bool parses_tools() const { return tools_ != nullptr || harmony_parses_tools_; }

 private:
  void Tools(std::string_view content, bool final, ChatOutputDelta* out);
  void Release(ParsedText parsed, ChatOutputDelta* out);  // numbers the calls, applies parallel_

  std::optional<ReasoningParser> reasoning_;
  std::optional<HarmonyParser> harmony_;  // harmony under tool_choice auto/none: replaces reasoning_ and tools_
  std::unique_ptr<ToolCallParser> tools_;
  bool parallel_;
  bool harmony_parses_tools_ = false;
  std::function<std::string()> make_id_;
  int num_calls_ = 0;
};

}  // namespace tessera::openai::tools
