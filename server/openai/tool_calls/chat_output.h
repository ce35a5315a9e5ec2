// The parsing a chat completion's text goes through before it becomes an
// assistant message: reasoning split off first (reasoning_parser.h), then
// tool calls parsed out of the rest (tool_call_parser.h). Used by both the
// non-streamed and the streamed response builders, so the two agree.
// One ChatOutputParser per choice; not thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

  bool parses_tools() const;
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
  bool parses_reasoning() const { return reasoning_.has_value(); }
  bool parses_tools() const { return tools_ != nullptr; }

 private:
  void Tools(std::string_view content, bool final, ChatOutputDelta* out);

  std::optional<ReasoningParser> reasoning_;
  std::unique_ptr<ToolCallParser> tools_;
  bool parallel_;
  std::function<std::string()> make_id_;
  int num_calls_ = 0;
};

}  // namespace tessera::openai::tools
