// MessageAccumulator / MessageStream: the Message object and the event
// sequence, exactly; reasoning, text and tool calls as blocks; stop reasons;
// usage with the prefix cache's share as cache_read_input_tokens; and the
// streamed blocks agreeing with the non-streamed ones.
#include "server/anthropic/messages_response.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "server/anthropic/errors.h"
#include "tests/unit/server/openai/response_test_util.h"

namespace tessera::anthropic {
namespace {

using nlohmann::json;
using openai::testing::D;
using openai::testing::U;
using openai::tools::ReasoningParserKind;
using openai::tools::ToolChoiceMode;
using openai::tools::ToolParserKind;

MessageOptions Options(bool parse) {
  MessageOptions o;
  o.id = "msg_1";
  o.model = "m";
  if (parse) {
    o.output.tool_choice = {ToolChoiceMode::kAuto, ""};
    o.output.tool_parser = ToolParserKind::kHermes;
    o.output.reasoning_parser = ReasoningParserKind::kQwen3;
  }
  auto n = std::make_shared<int>(0);
  o.make_tool_use_id = [n] { return "toolu_" + std::to_string((*n)++); };
  return o;
}

GenerationUpdate Last(std::string text, FinishReason finish, int64_t prompt, int64_t completion, int64_t cached = 0) {
  GenerationUpdate u = U({D(0, std::move(text), {}, finish)}, prompt, completion, true);
  u.cached_tokens = cached;
  return u;
}

// The events of an SSE text: [name, data] pairs; the name must match data.type.
std::vector<json> Events(const std::string& sse) {
  std::vector<json> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    const std::string ev = sse.substr(pos, end - pos);
    const size_t nl = ev.find('\n');
    const std::string name = ev.substr(7, nl - 7);
    json data = json::parse(ev.substr(nl + 7));
    EXPECT_EQ(ev.substr(0, 7), "event: ");
    EXPECT_EQ(ev.substr(nl + 1, 6), "data: ");
    EXPECT_EQ(data["type"], name);
    out.push_back(std::move(data));
    pos = end + 2;
  }
  return out;
}

TEST(MessagesResponseTest, PlainTextMessage) {
  MessageAccumulator acc(Options(false));
  acc.Add(U({D(0, "Hel")}, 7, 1));
  acc.Add(Last("lo", FinishReason::kLength, 7, 2, /*cached=*/4));
  EXPECT_EQ(acc.Build(), json::parse(R"({"id":"msg_1","type":"message","role":"assistant","model":"m",
    "content":[{"type":"text","text":"Hello"}],"stop_reason":"max_tokens","stop_sequence":null,
    "usage":{"input_tokens":3,"output_tokens":2,"cache_creation_input_tokens":0,"cache_read_input_tokens":4}})"));
}

TEST(MessagesResponseTest, StopReasons) {
  EXPECT_EQ(StopReasonJson(FinishReason::kNone, false, 0), nullptr);
  EXPECT_EQ(StopReasonJson(FinishReason::kStop, false, 0), "end_turn");
  EXPECT_EQ(StopReasonJson(FinishReason::kStop, true, 0), "stop_sequence");
  EXPECT_EQ(StopReasonJson(FinishReason::kStop, false, 2), "tool_use");
  EXPECT_EQ(StopReasonJson(FinishReason::kLength, false, 1), "max_tokens");
  EXPECT_EQ(StopReasonJson(FinishReason::kAbort, false, 0), "pause_turn");
  MessageAccumulator acc(Options(false));
  GenerationUpdate u = Last("x", FinishReason::kStop, 2, 1);
  u.choices[0].stop_string = "END";
  acc.Add(u);
  const json m = acc.Build();
  EXPECT_EQ(m["stop_reason"], "stop_sequence");
  EXPECT_EQ(m["stop_sequence"], "END");
}

TEST(MessagesResponseTest, EmptyOutputIsOneEmptyTextBlock) {
  MessageAccumulator acc(Options(false));
  acc.Add(Last("", FinishReason::kStop, 2, 1));
  EXPECT_EQ(acc.Build()["content"], json::parse(R"([{"type":"text","text":""}])"));
  MessageStream s(Options(false));
  std::vector<json> ev = Events(s.OnUpdate(Last("", FinishReason::kStop, 2, 1)));
  ASSERT_EQ(ev.size(), 6u);  // start, ping, block start/stop, delta, stop
  EXPECT_EQ(ev[2], json::parse(R"({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})"));
  EXPECT_EQ(ev[3], json::parse(R"({"type":"content_block_stop","index":0})"));
}

const std::string kOutput =
    "<think>\nplan\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Paris\"}}\n</tool_call>";

TEST(MessagesResponseTest, ThinkingTextAndToolUseBlocks) {
  MessageAccumulator acc(Options(true));
  acc.Add(Last(kOutput, FinishReason::kStop, 10, 20));
  const json m = acc.Build();
  EXPECT_EQ(m["content"], json::parse(R"([
    {"type":"thinking","thinking":"\nplan\n","signature":""},
    {"type":"text","text":"Checking."},
    {"type":"tool_use","id":"toolu_0","name":"get_weather","input":{"city":"Paris"}}])"))
      << m["content"].dump();
  EXPECT_EQ(m["stop_reason"], "tool_use");
}

TEST(MessagesResponseTest, StreamEventsByteByByteMatchTheMessage) {
  MessageAccumulator acc(Options(true));
  acc.Add(Last(kOutput, FinishReason::kStop, 10, 20, 8));
  const json whole = acc.Build();

  MessageStream s(Options(true));
  std::string sse;
  for (size_t i = 0; i < kOutput.size(); ++i) {
    const bool last = i + 1 == kOutput.size();
    GenerationUpdate u = last ? Last(kOutput.substr(i, 1), FinishReason::kStop, 10, 20, 8)
                              : U({D(0, kOutput.substr(i, 1))}, 10, static_cast<int64_t>(std::min<size_t>(i + 1, 19)));
    if (!last) u.cached_tokens = 8;
    sse += s.OnUpdate(u);
  }
  std::vector<json> ev = Events(sse);
  ASSERT_GE(ev.size(), 4u);
  EXPECT_EQ(ev[0]["type"], "message_start");
  EXPECT_EQ(ev[0]["message"]["content"], json::array());
  EXPECT_EQ(ev[0]["message"]["usage"]["cache_read_input_tokens"], 8);
  EXPECT_EQ(ev[1]["type"], "ping");
  // Rebuild the message the way a client does and compare with the whole one.
  json content = json::array();
  std::vector<std::string> partial;
  std::string order;
  for (size_t k = 2; k < ev.size(); ++k) {
    const json& e = ev[k];
    const std::string type = e["type"];
    if (type == "content_block_start") {
      EXPECT_EQ(e["index"], content.size());
      content.push_back(e["content_block"]);
      partial.emplace_back();
      order += "[";
    } else if (type == "content_block_delta") {
      const size_t i = e["index"];
      ASSERT_EQ(i + 1, content.size());
      const json& d = e["delta"];
      if (d["type"] == "text_delta") content[i]["text"] = content[i]["text"].get<std::string>() + d["text"].get<std::string>();
      if (d["type"] == "thinking_delta") {
        content[i]["thinking"] = content[i]["thinking"].get<std::string>() + d["thinking"].get<std::string>();
      }
      if (d["type"] == "input_json_delta") partial[i] += d["partial_json"].get<std::string>();
    } else if (type == "content_block_stop") {
      const size_t i = e["index"];
      if (content[i]["type"] == "tool_use") content[i]["input"] = json::parse(partial[i]);
      order += "]";
    } else if (type == "message_delta") {
      EXPECT_EQ(e["delta"]["stop_reason"], whole["stop_reason"]);
      EXPECT_EQ(e["delta"]["stop_sequence"], nullptr);
      EXPECT_EQ(e["usage"], whole["usage"]);
      order += "D";
    } else {
      EXPECT_EQ(type, "message_stop");
      EXPECT_EQ(k + 1, ev.size());
      order += "S";
    }
  }
  EXPECT_EQ(order, "[][][]DS");
  EXPECT_EQ(content, whole["content"]) << content.dump();
  EXPECT_EQ(s.Finish(), "");  // message_stop already sent
}

TEST(MessagesResponseTest, FinishClosesAStreamThatGotNoFinalDelta) {
  MessageStream s(Options(false));
  std::string sse = s.OnUpdate(U({D(0, "Hi")}, 3, 1));
  sse += s.Finish();
  std::vector<json> ev = Events(sse);
  std::vector<std::string> types;
  for (const json& e : ev) types.push_back(e["type"]);
  EXPECT_EQ(types, (std::vector<std::string>{"message_start", "ping", "content_block_start", "content_block_delta",
                                             "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(ev[5]["delta"]["stop_reason"], "end_turn");
}

TEST(MessagesResponseTest, ErrorShapes) {
  ApiError e = BadRequest("'x': bad", "x");
  EXPECT_EQ(ErrorBody(e), json::parse(R"({"type":"error","error":{"type":"invalid_request_error","message":"'x': bad"}})"));
  e.status = ApiStatus::kUnauthorized;
  EXPECT_EQ(ErrorBody(e)["error"]["type"], "authentication_error");
  e.status = ApiStatus::kNotFound;
  EXPECT_EQ(ErrorBody(e)["error"]["type"], "not_found_error");
  e.status = ApiStatus::kTooManyRequests;
  EXPECT_EQ(ErrorBody(e)["error"]["type"], "rate_limit_error");
  e.status = ApiStatus::kServiceUnavailable;
  EXPECT_EQ(ErrorBody(e)["error"]["type"], "overloaded_error");
  e.status = ApiStatus::kInternal;
  EXPECT_EQ(ErrorBody(e)["error"]["type"], "api_error");
  EXPECT_EQ(SseError(e), "event: error\ndata: {\"error\":{\"message\":\"'x': bad\",\"type\":\"api_error\"},\"type\":\"error\"}\n\n");
}

}  // namespace
}  // namespace tessera::anthropic
