#include "server/anthropic/messages_response.h"

#include <utility>

#include "server/anthropic/errors.h"

namespace tessera::anthropic {

using nlohmann::json;

std::string RandomToolUseId() { return openai::tools::RandomId("toolu_"); }

json UsageJson(const openai::UsageCounter& u) {
  json usage = {{"input_tokens", u.prompt_tokens - u.cached_tokens},
                {"output_tokens", u.completion_tokens},
                {"cache_creation_input_tokens", 0},
                {"cache_read_input_tokens", u.cached_tokens}};
  // Tessera's cache waterfall; cache_read_input_tokens is its cached sum.
  if (!u.cache_waterfall.empty()) usage["tessera_cache_details"] = openai::CacheWaterfallJson(u.cache_waterfall);
  return usage;
}

json StopReasonJson(FinishReason reason, bool stop_string, int num_tool_calls) {
  switch (reason) {
    case FinishReason::kNone: return nullptr;
    case FinishReason::kLength: return "max_tokens";
    case FinishReason::kAbort: return "pause_turn";
    case FinishReason::kStop: break;
  }
  if (num_tool_calls > 0) return "tool_use";
  return stop_string ? "stop_sequence" : "end_turn";
}

namespace {

// The parsed arguments of a call (ChatOutputParser releases only calls whose
// arguments are a JSON object, re-serialized compactly).
json ToolInput(const std::string& arguments) {
  json input = json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  return input.is_object() ? input : json::object();
}

json ToolUseBlock(const openai::tools::IndexedToolCall& c, json input) {
  return {{"type", "tool_use"}, {"id", c.id}, {"name", c.call.name}, {"input", std::move(input)}};
}

}  // namespace

MessageAccumulator::MessageAccumulator(MessageOptions options) : options_(std::move(options)) {}

void MessageAccumulator::Add(const GenerationUpdate& update) {
  usage_.Update(update);
  for (const ChoiceDelta& d : update.choices) {
    if (d.index != 0) continue;
    text_ += d.text;
    if (d.finish_reason != FinishReason::kNone) {
      finish_ = d.finish_reason;
      stop_string_ = d.stop_string;
    }
  }
}

json MessageAccumulator::Build() const {
  openai::tools::ChatOutputParser parser(options_.output, options_.make_tool_use_id);
  openai::tools::ChatOutputDelta out = parser.Feed(text_);
  out.Append(parser.Finish());
  json content = json::array();
  if (!out.reasoning.empty()) content.push_back({{"type", "thinking"}, {"thinking", out.reasoning}, {"signature", ""}});
  if (!out.content.empty()) content.push_back({{"type", "text"}, {"text", out.content}});
  for (const openai::tools::IndexedToolCall& c : out.tool_calls) {
    content.push_back(ToolUseBlock(c, ToolInput(c.call.arguments)));
  }
  if (content.empty()) content.push_back({{"type", "text"}, {"text", ""}});
  const bool stopped_by_string = stop_string_.has_value();
  return {{"id", options_.id},
          {"type", "message"},
          {"role", "assistant"},
          {"model", options_.model},
          {"content", std::move(content)},
          {"stop_reason", StopReasonJson(finish_, stopped_by_string, parser.num_tool_calls())},
          {"stop_sequence", stopped_by_string && parser.num_tool_calls() == 0 ? json(*stop_string_) : json(nullptr)},
          {"usage", anthropic::UsageJson(usage_)}};
}

MessageStream::MessageStream(MessageOptions options) : options_(std::move(options)) {
  parser_.emplace(options_.output, options_.make_tool_use_id);
}

void MessageStream::Begin(std::string* out) {
  if (started_) return;
  started_ = true;
  json message = {{"id", options_.id},
                  {"type", "message"},
                  {"role", "assistant"},
                  {"model", options_.model},
                  {"content", json::array()},
                  {"stop_reason", nullptr},
                  {"stop_sequence", nullptr},
                  {"usage", anthropic::UsageJson(usage_)}};
  *out += SseEvent("message_start", {{"type", "message_start"}, {"message", std::move(message)}});
  *out += SseEvent("ping", {{"type", "ping"}});
}

void MessageStream::Close(std::string* out) {
  if (open_ == Block::kNone) return;
  *out += SseEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
  open_ = Block::kNone;
}

void MessageStream::Open(Block kind, std::string* out) {
  if (open_ == kind) return;
  Close(out);
  open_ = kind;
  ++index_;
  json block = kind == Block::kText ? json{{"type", "text"}, {"text", ""}}
                                    : json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
  *out += SseEvent("content_block_start",
                   {{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(block)}});
}

void MessageStream::Emit(const openai::tools::ChatOutputDelta& d, std::string* out) {
  auto delta = [&](json body) {
    *out += SseEvent("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", body}});
  };
  if (!d.reasoning.empty()) {
    Open(Block::kThinking, out);
    delta({{"type", "thinking_delta"}, {"thinking", d.reasoning}});
  }
  if (!d.content.empty()) {
    Open(Block::kText, out);
    delta({{"type", "text_delta"}, {"text", d.content}});
  }
  for (const openai::tools::IndexedToolCall& c : d.tool_calls) {
    Close(out);
    ++index_;
    *out += SseEvent("content_block_start", {{"type", "content_block_start"},
                                             {"index", index_},
                                             {"content_block", ToolUseBlock(c, json::object())}});
    delta({{"type", "input_json_delta"}, {"partial_json", c.call.arguments}});
    *out += SseEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
  }
}

std::string MessageStream::OnUpdate(const GenerationUpdate& update) {
  usage_.Update(update);
  std::string out;
  Begin(&out);
  for (const ChoiceDelta& d : update.choices) {
    if (d.index != 0) continue;
    const bool finished = d.finish_reason != FinishReason::kNone;
    openai::tools::ChatOutputDelta parsed = parser_->Feed(d.text);
    if (finished) parsed.Append(parser_->Finish());
    Emit(parsed, &out);
    if (finished) End(d.finish_reason, d.stop_string, &out);
  }
  return out;
}

void MessageStream::End(FinishReason reason, const std::optional<std::string>& stop_string, std::string* out) {
  if (stopped_) return;
  stopped_ = true;
  if (index_ < 0) Open(Block::kText, out);  // as the non-streamed message: one empty text block
  Close(out);
  const int calls = parser_->num_tool_calls();
  const bool by_string = stop_string.has_value();
  json delta = {{"stop_reason", StopReasonJson(reason, by_string, calls)},
                {"stop_sequence", by_string && calls == 0 ? json(*stop_string) : json(nullptr)}};
  *out += SseEvent("message_delta", {{"type", "message_delta"}, {"delta", std::move(delta)}, {"usage", anthropic::UsageJson(usage_)}});
  *out += SseEvent("message_stop", {{"type", "message_stop"}});
}

std::string MessageStream::Finish() {
  std::string out;
  if (stopped_) return out;
  Begin(&out);
  Emit(parser_->Finish(), &out);
  End(FinishReason::kStop, std::nullopt, &out);
  return out;
}

}  // namespace tessera::anthropic
