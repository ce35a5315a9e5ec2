// libFuzzer target: the chat output parsers (reasoning + tool calls, every
// tool-call format incl. harmony and DeepSeek-V3, and tool_choice mode) over
// arbitrary model output.
// Input: byte 0 picks the parser set, byte 1 the streamed piece size; the rest
// is the output text. Checked on every input: no crash or sanitizer report;
// the streamed pieces give exactly what the whole text gives (content,
// reasoning, calls); every call has a name and a JSON object as arguments;
// call indices count up from 0; parallel_tool_calls=false yields one call at most.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai/tool_calls/chat_output.h"

namespace {

using namespace tessera::openai::tools;

struct Out {
  std::string reasoning, content;
  std::vector<std::string> calls;  // name + "\n" + arguments
};

void Add(ChatOutputDelta d, Out* out) {
  out->reasoning += d.reasoning;
  out->content += d.content;
  for (const IndexedToolCall& c : d.tool_calls) {
    if (c.index != static_cast<int>(out->calls.size())) std::abort();
    const auto args = nlohmann::json::parse(c.call.arguments, nullptr, /*allow_exceptions=*/false);
    if (!args.is_object() || c.call.name.empty()) std::abort();
    out->calls.push_back(c.call.name + "\n" + c.call.arguments);
  }
}

Out Run(const ChatOutputOptions& o, const std::string& text, size_t piece) {
  ChatOutputParser p(o, [] { return std::string("call_x"); });
  Out out;
  for (size_t i = 0; i < text.size(); i += piece) Add(p.Feed(std::string_view(text).substr(i, piece)), &out);
  Add(p.Finish(), &out);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 || size > 16 * 1024) return 0;
  const uint8_t pick = data[0];
  const size_t piece = 1 + data[1] % 17;
  const std::string text(reinterpret_cast<const char*>(data) + 2, size - 2);
  ChatOutputOptions o;
  switch (pick % 8) {
    case 0: o.tool_choice.mode = ToolChoiceMode::kAuto; o.tool_parser = ToolParserKind::kHermes; break;
    case 1: o.tool_choice.mode = ToolChoiceMode::kAuto; o.tool_parser = ToolParserKind::kLlama3Json; break;
    case 2: o.tool_choice.mode = ToolChoiceMode::kAuto; o.tool_parser = ToolParserKind::kMistral; break;
    case 3: o.tool_choice.mode = ToolChoiceMode::kAuto; o.tool_parser = ToolParserKind::kOpenAI; break;
    case 4: o.tool_choice.mode = ToolChoiceMode::kAuto; o.tool_parser = ToolParserKind::kDeepSeekV3; break;
    case 5: o.tool_choice.mode = ToolChoiceMode::kRequired; break;
    case 6: o.tool_choice = {ToolChoiceMode::kNamed, "f"}; break;
    default: o.tool_choice.mode = ToolChoiceMode::kNone; break;
  }
  switch ((pick / 8) % 3) {
    case 0: break;
    case 1: o.reasoning_parser = ReasoningParserKind::kQwen3; break;
    default: o.reasoning_parser = ReasoningParserKind::kDeepSeekR1; break;
  }
  o.prompt_opened_think = (pick / 24) % 2 == 1;
  o.parallel_tool_calls = (pick / 48) % 2 == 0;
  if (o.tool_parser == ToolParserKind::kOpenAI) {  // harmony: one parser; the prompt's open message varies
    o.reasoning_parser = ReasoningParserKind::kOpenAIGptOss;
    static constexpr const char* kHeaders[] = {"", "<|start|>assistant",
                                               "<|start|>assistant<|channel|>final<|message|>"};
    o.harmony_open_header = kHeaders[(pick / 8) % 3];
  }
  const Out whole = Run(o, text, text.size() + 1);
  const Out streamed = Run(o, text, piece);
  if (whole.reasoning != streamed.reasoning || whole.content != streamed.content || whole.calls != streamed.calls) {
    std::abort();
  }
  if (!o.parallel_tool_calls && whole.calls.size() > 1) std::abort();
  return 0;
}
