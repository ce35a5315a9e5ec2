// The Response object and its stream of semantic events from ServingEngine
// updates. The generated text goes through the chat output parser
// (openai/tool_calls/chat_output.h), so reasoning, text and function calls
// are what a chat completion of the same request would say: reasoning
// becomes `reasoning` items (content reasoning_text), text a `message` item
// (one output_text part), each call a `function_call` item.
//
// Streamed or not, one renderer builds both the events and the final object
// (the non-streamed path drops the events), so the two agree by
// construction. Events carry sequence_number from 0. One instance per
// request, used by one thread at a time (the job's strand).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/openai/api_error.h"
#include "server/openai/response_common.h"
#include "server/openai/tool_calls/chat_output.h"
#include "server/serving/serving_engine.h"

namespace tessera::responses {

using Json = nlohmann::ordered_json;

struct RenderOptions {
  std::string id;          // "resp_…"
  std::string model;       // the served model name
  int64_t created_at = 0;  // Unix seconds
  Json echo = Json::object();  // ResponsesRequest::echo
  openai::tools::ChatOutputOptions output;
  // Item ids ("msg_…", "rs_…", "fc_…") and call ids; tests pass deterministic ones.
  std::function<std::string(std::string_view prefix)> make_id = openai::tools::RandomId;
  std::function<std::string()> make_call_id = openai::tools::RandomToolCallId;
  // Asked when the generation ends with an abort: true (cancel was called)
  // makes the status "cancelled", false "failed" (the server aborted it:
  // request timeout, drain deadline).
  std::function<bool()> cancel_requested = [] { return false; };
};

// {"input_tokens","input_tokens_details":{"cached_tokens"},"output_tokens","total_tokens"}.
Json UsageJson(const openai::UsageCounter& usage);

// "event: <type>\ndata: <json>\n\n".
std::string SseEvent(const Json& event);

class ResponseRenderer {
 public:
  explicit ResponseRenderer(RenderOptions options);

  // response.created and response.in_progress (status in_progress, no output).
  std::string Start();
  // The events of an update: output_item.added, content_part.added and the
  // deltas (output_text, reasoning_text, function_call_arguments) as text
  // arrives, each item's done events when the next begins; on the last
  // update the open item's done events and the terminal event
  // (response.completed, or response.incomplete for max_output_tokens and
  // cancel, response.failed for a server abort).
  std::string OnUpdate(const GenerationUpdate& update);
  // The tail when the generation ended without a final delta (nothing after
  // the terminal event): closes the response as completed.
  std::string Finish();
  // The `error` event a failed stream ends with.
  std::string Error(const ApiError& error);

  // The Response object: in progress until the terminal event, then final.
  Json Object() const;
  // Output items so far (stored form, for the conversation a continuation replays).
  const Json& output() const { return output_; }
  bool ended() const { return ended_; }

 private:
  enum class Open { kNone, kMessage, kReasoning };
  std::string Event(Json event);
  void OpenItem(Open kind, std::string* out);
  void CloseItem(std::string* out);
  void Emit(const openai::tools::ChatOutputDelta& delta, std::string* out);
  void End(FinishReason reason, std::string* out);

  RenderOptions options_;
  std::optional<openai::tools::ChatOutputParser> parser_;
  openai::UsageCounter usage_;
  Json output_ = Json::array();
  Open open_ = Open::kNone;
  int64_t sequence_ = 0;
  std::string status_ = "in_progress";
  Json incomplete_details_;  // null
  Json error_;               // null
  bool ended_ = false;
  int64_t completed_at_ = 0;  // Unix seconds, set at the terminal event
};

}  // namespace tessera::responses
