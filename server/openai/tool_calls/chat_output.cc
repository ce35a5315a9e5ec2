#include "server/openai/tool_calls/chat_output.h"

#include "server/openai/tool_calls/tool_grammar.h"

#include <random>
#include <utility>

namespace tessera::openai::tools {

bool ChatOutputOptions::parses_tools() const {
  switch (tool_choice.mode) {
    case ToolChoiceMode::kAuto: return tool_parser != ToolParserKind::kNone;
    case ToolChoiceMode::kRequired:
    case ToolChoiceMode::kNamed: return true;
    case ToolChoiceMode::kNone: break;
  }
  return false;
}

void ChatOutputDelta::Append(ChatOutputDelta other) {
  reasoning += other.reasoning;
  content += other.content;
  for (IndexedToolCall& c : other.tool_calls) tool_calls.push_back(std::move(c));
}

std::string RandomId(std::string_view prefix) {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<int> pick(0, static_cast<int>(sizeof(kAlnum)) - 2);
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id += kAlnum[pick(rng)];
  return id;
}

std::string RandomToolCallId() { return RandomId("call_"); }

ChatOutputParser::ChatOutputParser(const ChatOutputOptions& o, std::function<std::string()> make_id)
    : parallel_(o.parallel_tool_calls), make_id_(std::move(make_id)) {
  if (o.reasoning_parser != ReasoningParserKind::kNone) reasoning_.emplace(o.reasoning_parser, o.prompt_opened_think);
  switch (o.tool_choice.mode) {
    case ToolChoiceMode::kAuto: tools_ = MakeToolCallParser(o.tool_parser); break;
    case ToolChoiceMode::kRequired:
    case ToolChoiceMode::kNamed:
      // The format ToolCallGrammar forced the output into.
      switch (ForcedToolCallFormat(o.tool_parser)) {
        case ForcedFormat::kHermes: tools_ = MakeToolCallParser(ToolParserKind::kHermes); break;
        case ForcedFormat::kLlama3Json: tools_ = MakeToolCallParser(ToolParserKind::kLlama3Json); break;
        case ForcedFormat::kJson:
          tools_ = o.tool_choice.mode == ToolChoiceMode::kRequired
                       ? MakeRequiredToolCallParser()
                       : MakeNamedToolCallParser(o.tool_choice.function_name);
          break;
      }
      break;
    case ToolChoiceMode::kNone: break;
  }
}

void ChatOutputParser::Tools(std::string_view content, bool final, ChatOutputDelta* out) {
  if (!tools_) {
    out->content.append(content);
    return;
  }
  ParsedText parsed;
  tools_->Feed(content, &parsed);
  if (final) tools_->Finish(&parsed);
  out->content += parsed.content;
  for (ToolCall& call : parsed.calls) {
    if (!parallel_ && num_calls_ >= 1) continue;  // parallel_tool_calls=false: the first call only
    out->tool_calls.push_back({num_calls_++, make_id_(), std::move(call)});
  }
}

ChatOutputDelta ChatOutputParser::Feed(std::string_view text) {
  ChatOutputDelta out;
  if (!reasoning_) {
    Tools(text, /*final=*/false, &out);
    return out;
  }
  ReasoningSplit split;
  reasoning_->Feed(text, &split);
  out.reasoning = std::move(split.reasoning);
  Tools(split.content, /*final=*/false, &out);
  return out;
}

ChatOutputDelta ChatOutputParser::Finish() {
  ChatOutputDelta out;
  if (!reasoning_) {
    Tools("", /*final=*/true, &out);
    return out;
  }
  ReasoningSplit split;
  reasoning_->Finish(&split);
  out.reasoning = std::move(split.reasoning);
  Tools(split.content, /*final=*/true, &out);
  return out;
}

}  // namespace tessera::openai::tools
