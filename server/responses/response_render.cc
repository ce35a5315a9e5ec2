#include "server/responses/response_render.h"

#include <chrono>
#include <utility>

#include "server/openai/sse.h"

namespace tessera::responses {

Json UsageJson(const openai::UsageCounter& u) {
  Json details = Json::object();
  if (!u.cache_waterfall.empty()) details = Json(openai::CacheWaterfallJson(u.cache_waterfall));
  details["cached_tokens"] = u.cached_tokens;
  return {{"input_tokens", u.prompt_tokens},
          {"input_tokens_details", std::move(details)},
          {"output_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

std::string SseEvent(const Json& event) {
  return "event: " + event.value("type", std::string()) + "\ndata: " + openai::DumpJson(event) + "\n\n";
}

ResponseRenderer::ResponseRenderer(RenderOptions options) : options_(std::move(options)) {
  parser_.emplace(options_.output, options_.make_call_id);
}

Json ResponseRenderer::Object() const {
  Json r = {{"id", options_.id},
            {"object", "response"},
            {"created_at", options_.created_at},
            {"status", status_},
            {"background", false},
            {"error", error_},
            {"incomplete_details", incomplete_details_},
            {"model", options_.model},
            {"output", output_}};
  for (auto it = options_.echo.begin(); it != options_.echo.end(); ++it) r[it.key()] = it.value();
  if (ended_) {
    r["completed_at"] = completed_at_;
    r["usage"] = responses::UsageJson(usage_);
  } else {
    r["usage"] = nullptr;
  }
  return r;
}

std::string ResponseRenderer::Event(Json event) {
  event["sequence_number"] = sequence_++;
  return SseEvent(event);
}

std::string ResponseRenderer::Start() {
  std::string out = Event({{"type", "response.created"}, {"response", Object()}});
  out += Event({{"type", "response.in_progress"}, {"response", Object()}});
  return out;
}

void ResponseRenderer::OpenItem(Open kind, std::string* out) {
  if (open_ == kind) return;
  CloseItem(out);
  open_ = kind;
  const int64_t index = static_cast<int64_t>(output_.size());
  Json item, part;
  if (kind == Open::kMessage) {
    item = {{"id", options_.make_id("msg_")}, {"type", "message"}, {"status", "in_progress"},
            {"role", "assistant"}, {"content", Json::array()}};
    part = {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}};
  } else {
    item = {{"id", options_.make_id("rs_")}, {"type", "reasoning"}, {"summary", Json::array()},
            {"content", Json::array()}, {"status", "in_progress"}};
    part = {{"type", "reasoning_text"}, {"text", ""}};
  }
  const std::string id = item["id"];
  *out += Event({{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}});
  *out += Event({{"type", "response.content_part.added"}, {"item_id", id}, {"output_index", index},
                 {"content_index", 0}, {"part", part}});
  item["content"].push_back(std::move(part));
  output_.push_back(std::move(item));
}

void ResponseRenderer::CloseItem(std::string* out) {
  if (open_ == Open::kNone) return;
  const int64_t index = static_cast<int64_t>(output_.size()) - 1;
  Json& item = output_.back();
  const std::string id = item["id"];
  Json& part = item["content"][0];
  const bool message = open_ == Open::kMessage;
  *out += Event({{"type", message ? "response.output_text.done" : "response.reasoning_text.done"},
                 {"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", part["text"]}});
  *out += Event({{"type", "response.content_part.done"}, {"item_id", id}, {"output_index", index},
                 {"content_index", 0}, {"part", part}});
  item["status"] = "completed";
  *out += Event({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
  open_ = Open::kNone;
}

void ResponseRenderer::Emit(const openai::tools::ChatOutputDelta& d, std::string* out) {
  auto delta = [&](const char* type, const std::string& text) {
    Json& item = output_.back();
    item["content"][0]["text"] = item["content"][0]["text"].get<std::string>() + text;
    Json e = {{"type", type}, {"item_id", item["id"]}, {"output_index", static_cast<int64_t>(output_.size()) - 1},
              {"content_index", 0}, {"delta", text}};
    if (open_ == Open::kMessage) e["logprobs"] = Json::array();
    *out += Event(std::move(e));
  };
  if (!d.reasoning.empty()) {
    OpenItem(Open::kReasoning, out);
    delta("response.reasoning_text.delta", d.reasoning);
  }
  if (!d.content.empty()) {
    OpenItem(Open::kMessage, out);
    delta("response.output_text.delta", d.content);
  }
  for (const openai::tools::IndexedToolCall& c : d.tool_calls) {
    CloseItem(out);
    const int64_t index = static_cast<int64_t>(output_.size());
    Json item = {{"id", options_.make_id("fc_")}, {"type", "function_call"}, {"status", "in_progress"},
                 {"arguments", ""}, {"call_id", c.id}, {"name", c.call.name}};
    const std::string id = item["id"];
    *out += Event({{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}});
    // The parser releases a call whole: its arguments arrive in one delta.
    *out += Event({{"type", "response.function_call_arguments.delta"}, {"item_id", id}, {"output_index", index},
                   {"delta", c.call.arguments}});
    *out += Event({{"type", "response.function_call_arguments.done"}, {"item_id", id}, {"output_index", index},
                   {"name", c.call.name}, {"arguments", c.call.arguments}});
    item["arguments"] = c.call.arguments;
    item["status"] = "completed";
    *out += Event({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
    output_.push_back(std::move(item));
  }
}

void ResponseRenderer::End(FinishReason reason, std::string* out) {
  if (ended_) return;
  CloseItem(out);
  const char* event = "response.completed";
  if (reason == FinishReason::kLength) {
    status_ = "incomplete";
    incomplete_details_ = {{"reason", "max_output_tokens"}};
    event = "response.incomplete";
  } else if (reason == FinishReason::kAbort && options_.cancel_requested()) {
    status_ = "cancelled";
    event = "response.incomplete";
  } else if (reason == FinishReason::kAbort) {
    status_ = "failed";
    error_ = {{"code", "server_error"},
              {"message", "the server aborted the response (its request timeout or shutdown deadline)"}};
    event = "response.failed";
  } else {
    status_ = "completed";
  }
  ended_ = true;
  completed_at_ =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  *out += Event({{"type", event}, {"response", Object()}});
}

std::string ResponseRenderer::OnUpdate(const GenerationUpdate& update) {
  usage_.Update(update);
  std::string out;
  for (const ChoiceDelta& d : update.choices) {
    if (d.index != 0 || ended_) continue;
    const bool finished = d.finish_reason != FinishReason::kNone;
    openai::tools::ChatOutputDelta parsed = parser_->Feed(d.text);
    if (finished) parsed.Append(parser_->Finish());
    Emit(parsed, &out);
    if (finished) End(d.finish_reason, &out);
  }
  return out;
}

std::string ResponseRenderer::Finish() {
  std::string out;
  if (ended_) return out;
  Emit(parser_->Finish(), &out);
  End(FinishReason::kStop, &out);
  return out;
}

std::string ResponseRenderer::Error(const ApiError& error) {
  return Event({{"type", "error"},
                {"code", error.code.empty() ? Json(error.type) : Json(error.code)},
                {"message", error.message},
                {"param", error.param.empty() ? Json() : Json(error.param)}});
}

}  // namespace tessera::responses
