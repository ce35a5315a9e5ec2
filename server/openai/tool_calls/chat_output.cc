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

bool IsHarmony(ToolParserKind tool_parser, ReasoningParserKind reasoning_parser) {
  return tool_parser == ToolParserKind::kOpenAI || reasoning_parser == ReasoningParserKind::kOpenAIGptOss;
}

StatusOr<ChatOutputConfig> ResolveChatOutputConfig(std::optional<ToolParserKind> tool_parser,
                                                   std::optional<ReasoningParserKind> reasoning_parser,
                                                   const text::ChatTemplate* chat_template) {
  ChatOutputConfig c;
  if (tool_parser) {
    c.tool_parser = *tool_parser;
  } else if (chat_template != nullptr) {
    c.tool_parser = DetectToolParser(*chat_template);
  }
  c.reasoning_parser = reasoning_parser.value_or(ReasoningParserKind::kNone);
  if (!IsHarmony(c.tool_parser, c.reasoning_parser)) return c;
  const bool tool_other = c.tool_parser != ToolParserKind::kNone && c.tool_parser != ToolParserKind::kOpenAI;
  const bool reasoning_other =
      c.reasoning_parser != ReasoningParserKind::kNone && c.reasoning_parser != ReasoningParserKind::kOpenAIGptOss;
  if ((tool_other && tool_parser) || (reasoning_other && reasoning_parser)) {
    return InvalidArgument(
        "--tool-call-parser " + std::string(ToolParserName(c.tool_parser)) + " and --reasoning-parser " +
        std::string(ReasoningParserName(c.reasoning_parser)) +
        " do not read the same format: the harmony format (openai / openai_gptoss) is one parser for both");
  }
  // Only the template's guess differs from a harmony flag: the flag wins.
  c.tool_parser = ToolParserKind::kOpenAI;
  c.reasoning_parser = ReasoningParserKind::kOpenAIGptOss;
  return c;
}

ChatOutputParser::ChatOutputParser(const ChatOutputOptions& o, std::function<std::string()> make_id)
    : parallel_(o.parallel_tool_calls), make_id_(std::move(make_id)) {
  const bool forced = o.tool_choice.mode == ToolChoiceMode::kRequired || o.tool_choice.mode == ToolChoiceMode::kNamed;
  if (o.harmony() && !forced) {  // forced calls are plain JSON (ForcedToolCallFormat), read below
    harmony_parses_tools_ = o.parses_tools();
    harmony_.emplace(o.harmony_open_header, harmony_parses_tools_);
    return;
  }
  // Harmony under forced calls: the grammar forces plain JSON from the first token (no channels).
  if (o.reasoning_parser != ReasoningParserKind::kNone && !o.harmony()) {
    reasoning_.emplace(o.reasoning_parser, o.prompt_opened_think);
  }
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
  Release(std::move(parsed), out);
}

void ChatOutputParser::Release(ParsedText parsed, ChatOutputDelta* out) {
  out->content += parsed.content;
  for (ToolCall& call : parsed.calls) {
    if (!parallel_ && num_calls_ >= 1) continue;  // parallel_tool_calls=false: the first call only
    out->tool_calls.push_back({num_calls_++, make_id_(), std::move(call)});
  }
}

ChatOutputDelta ChatOutputParser::Feed(std::string_view text) {
  ChatOutputDelta out;
  if (harmony_) {
    HarmonyOutput h;
    harmony_->Feed(text, &h);
    out.reasoning = std::move(h.reasoning);
    Release(std::move(h.text), &out);
    return out;
  }
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
  if (harmony_) {
    HarmonyOutput h;
    harmony_->Finish(&h);
    out.reasoning = std::move(h.reasoning);
    Release(std::move(h.text), &out);
    return out;
  }
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
