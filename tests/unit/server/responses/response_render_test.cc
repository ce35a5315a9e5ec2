// ResponseRenderer: the event sequence exactly (names, sequence numbers,
// item ids and indexes), reasoning / message / function_call items from the
// chat output parser, the terminal status per finish reason, and the
// streamed object equal to the non-streamed one.
#include "server/responses/response_render.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/unit/server/openai/response_test_util.h"

namespace tessera::responses {
namespace {

using openai::testing::D;
using openai::testing::U;
using openai::tools::ReasoningParserKind;
using openai::tools::ToolChoiceMode;
using openai::tools::ToolParserKind;

RenderOptions Options(bool parse, bool cancelled = false) {
  RenderOptions o;
  o.id = "resp_1";
  o.model = "m";
  o.created_at = 5;
  o.echo = {{"store", true}};
  if (parse) {
    o.output.tool_choice = {ToolChoiceMode::kAuto, ""};
    o.output.tool_parser = ToolParserKind::kHermes;
    o.output.reasoning_parser = ReasoningParserKind::kQwen3;
  }
  auto n = std::make_shared<int>(0);
  o.make_id = [n](std::string_view prefix) { return std::string(prefix) + std::to_string((*n)++); };
  o.make_call_id = [n] { return "call_" + std::to_string((*n)++); };
  o.cancel_requested = [cancelled] { return cancelled; };
  return o;
}

// The events of an SSE text; each event's name must be its data's type.
std::vector<Json> Events(const std::string& sse) {
  std::vector<Json> out;
  for (size_t pos = 0; pos < sse.size();) {
    const size_t end = sse.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    const std::string ev = sse.substr(pos, end - pos);
    const size_t nl = ev.find('\n');
    EXPECT_EQ(ev.substr(0, 7), "event: ");
    Json data = Json::parse(ev.substr(nl + 7));
    EXPECT_EQ(data["type"], ev.substr(7, nl - 7));
    out.push_back(std::move(data));
    pos = end + 2;
  }
  return out;
}

// Key order aside (the wire's JSON is key-sorted).
nlohmann::json Sorted(const Json& j) { return nlohmann::json(j); }

// Output items without their ids (generated in a different order when whole).
nlohmann::json WithoutIds(const Json& output) {
  nlohmann::json out = Sorted(output);
  for (auto& item : out) {
    item.erase("id");
    item.erase("call_id");
  }
  return out;
}

std::vector<std::string> Types(const std::vector<Json>& events) {
  std::vector<std::string> t;
  for (const Json& e : events) t.push_back(e["type"]);
  return t;
}

TEST(ResponseRenderTest, ReasoningTextAndCallEventsInOrder) {
  ResponseRenderer r(Options(true));
  std::string sse = r.Start();
  sse += r.OnUpdate(U({D(0, "<think>hm")}, 10, 2));
  sse += r.OnUpdate(U({D(0, "m</think>Hel")}, 10, 4));
  GenerationUpdate last = U({D(0, "lo<tool_call>\n{\"name\":\"f\",\"arguments\":{\"x\":1}}\n</tool_call>", {},
                               FinishReason::kStop)},
                            10, 9, true);
  last.cached_tokens = 4;
  sse += r.OnUpdate(last);
  EXPECT_EQ(r.Finish(), "");
  const std::vector<Json> ev = Events(sse);
  EXPECT_EQ(Types(ev), (std::vector<std::string>{
                           "response.created", "response.in_progress",
                           "response.output_item.added", "response.content_part.added",
                           "response.reasoning_text.delta", "response.reasoning_text.delta",
                           "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
                           "response.output_item.added", "response.content_part.added",
                           "response.output_text.delta", "response.output_text.delta",
                           "response.output_text.done", "response.content_part.done", "response.output_item.done",
                           "response.output_item.added", "response.function_call_arguments.delta",
                           "response.function_call_arguments.done", "response.output_item.done",
                           "response.completed"}));
  for (size_t i = 0; i < ev.size(); ++i) EXPECT_EQ(ev[i]["sequence_number"], i);
  EXPECT_EQ(ev[0]["response"]["status"], "in_progress");
  EXPECT_EQ(ev[0]["response"]["output"], Json::array());
  EXPECT_EQ(ev[6]["text"], "hmm");
  EXPECT_EQ(ev[13]["text"], "Hello");
  EXPECT_EQ(ev[13]["item_id"], ev[9]["item"]["id"]);
  EXPECT_EQ(ev[13]["output_index"], 1);
  EXPECT_EQ(ev[18]["arguments"], "{\"x\":1}");
  const Json final = ev.back()["response"];
  EXPECT_EQ(Sorted(final), Sorted(r.Object()));
  EXPECT_EQ(final["status"], "completed");
  EXPECT_EQ(final["store"], true);
  EXPECT_EQ(Sorted(final["usage"]), nlohmann::json::parse(R"({"input_tokens":10,"input_tokens_details":{"cached_tokens":4},
                                            "output_tokens":9,"total_tokens":19})"));
  ASSERT_EQ(final["output"].size(), 3u);
  EXPECT_EQ(Sorted(final["output"][0]), nlohmann::json::parse(R"({"id":"rs_0","type":"reasoning","summary":[],
      "content":[{"type":"reasoning_text","text":"hmm"}],"status":"completed"})"));
  EXPECT_EQ(Sorted(final["output"][1]), nlohmann::json::parse(R"({"id":"msg_1","type":"message","status":"completed","role":"assistant",
      "content":[{"type":"output_text","text":"Hello","annotations":[]}]})"));
  EXPECT_EQ(Sorted(final["output"][2]), nlohmann::json::parse(R"({"id":"fc_3","type":"function_call","status":"completed",
      "arguments":"{\"x\":1}","call_id":"call_2","name":"f"})"));
  // Each item's done event carries the item as the final object has it.
  EXPECT_EQ(Sorted(ev[8]["item"]), Sorted(final["output"][0]));
  EXPECT_EQ(Sorted(ev[15]["item"]), Sorted(final["output"][1]));
  EXPECT_EQ(Sorted(ev[19]["item"]), Sorted(final["output"][2]));

  ResponseRenderer whole(Options(true));  // the same text in one update: the same object
  whole.OnUpdate(U({D(0, "<think>hmm</think>Hello<tool_call>\n{\"name\":\"f\",\"arguments\":{\"x\":1}}\n</tool_call>",
                      {}, FinishReason::kStop)},
                   10, 9, true));
  Json w = whole.Object();
  EXPECT_EQ(WithoutIds(w["output"]), WithoutIds(final["output"]));
}

TEST(ResponseRenderTest, TerminalStatusFollowsTheFinishReason) {
  struct Case {
    FinishReason reason;
    bool cancelled;
    const char* status;
    const char* event;
  } cases[] = {{FinishReason::kLength, false, "incomplete", "response.incomplete"},
               {FinishReason::kAbort, true, "cancelled", "response.incomplete"},
               {FinishReason::kAbort, false, "failed", "response.failed"}};
  for (const Case& c : cases) {
    ResponseRenderer r(Options(false, c.cancelled));
    const std::vector<Json> ev = Events(r.OnUpdate(U({D(0, "ab", {}, c.reason)}, 3, 2, true)));
    EXPECT_EQ(ev.back()["type"], c.event);
    EXPECT_EQ(ev.back()["response"]["status"], c.status);
    EXPECT_EQ(r.Object()["output"][0]["content"][0]["text"], "ab");
  }
  ResponseRenderer r(Options(false));
  r.OnUpdate(U({D(0, "ab", {}, FinishReason::kLength)}, 3, 2, true));
  EXPECT_EQ(r.Object()["incomplete_details"], Json::parse(R"({"reason":"max_output_tokens"})"));
  ResponseRenderer empty(Options(false));  // ended without a final delta: completed, no output
  const std::vector<Json> ev = Events(empty.Start() + empty.Finish());
  EXPECT_EQ(Types(ev), (std::vector<std::string>{"response.created", "response.in_progress", "response.completed"}));
  EXPECT_EQ(ev.back()["response"]["output"], Json::array());
}

TEST(ResponseRenderTest, ErrorEventContinuesTheSequence) {
  ResponseRenderer r(Options(false));
  r.Start();
  const std::vector<Json> ev = Events(r.Error(BadRequest("bad", "input", "c")));
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(Sorted(ev[0]), nlohmann::json::parse(R"({"type":"error","code":"c","message":"bad","param":"input","sequence_number":2})"));
}

}  // namespace
}  // namespace tessera::responses
