// ParseResponsesRequest: input as text and items, conversion into chat
// messages (assistant runs merged, tool results, reasoning as context),
// tools / tool_choice / text.format / reasoning into the chat request, and
// every refusal naming its field.
#include "server/responses/responses_request.h"

#include <gtest/gtest.h>

#include <string>

#include "server/openai/structured_request.h"

namespace tessera::responses {
namespace {

using openai::tools::ToolChoiceMode;

openai::RequestLimits Limits() {
  openai::RequestLimits l;
  l.served_model_name = "m";
  return l;
}

ResponsesRequest Parse(const std::string& body) {
  ResponsesRequest r;
  auto e = ParseResponsesRequest(body, Limits(), &r);
  EXPECT_FALSE(e.has_value()) << body << " -> " << (e ? e->message : "");
  return r;
}

// The refusal of `body`: its param and message.
ApiError Refusal(const std::string& body) {
  ResponsesRequest r;
  auto e = ParseResponsesRequest(body, Limits(), &r);
  EXPECT_TRUE(e.has_value()) << body;
  return e.value_or(ApiError{});
}

Json Messages(ResponsesRequest r, const Json& prior = Json::array()) {
  auto e = BuildChatMessages(prior, &r);
  EXPECT_FALSE(e.has_value()) << (e ? e->message : "");
  return r.chat.messages;
}

TEST(ResponsesRequestTest, StringInputIsOneUserMessageAfterInstructions) {
  ResponsesRequest r = Parse(R"({"model":"m","input":"hi","instructions":"be brief","max_output_tokens":7,
                                 "temperature":0,"top_p":0.5,"store":false,"user":"u1"})");
  ASSERT_EQ(r.input_items.size(), 1u);
  EXPECT_EQ(r.input_items[0]["type"], "message");
  EXPECT_EQ(r.input_items[0]["role"], "user");
  EXPECT_EQ(r.input_items[0]["content"][0], (Json{{"type", "input_text"}, {"text", "hi"}}));
  EXPECT_EQ(r.input_items[0]["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(r.chat.params.max_tokens, 7);
  EXPECT_EQ(r.chat.params.temperature, 0.0f);
  EXPECT_FALSE(r.store);
  EXPECT_EQ(r.user, "u1");
  EXPECT_EQ(r.echo["instructions"], "be brief");
  EXPECT_EQ(r.echo["max_output_tokens"], 7);
  EXPECT_EQ(Messages(r), (Json::parse(R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi"}])")));
}

TEST(ResponsesRequestTest, ItemsBecomeChatMessages) {
  ResponsesRequest r = Parse(R"({"model":"m","input":[
      {"role":"developer","content":"rules"},
      {"type":"message","role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
      {"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"think"}]},
      {"type":"message","role":"assistant","id":"msg_9","content":[{"type":"output_text","text":"ok","annotations":[]}]},
      {"type":"function_call","call_id":"call_1","name":"f","arguments":"{\"x\":1}"},
      {"type":"function_call_output","call_id":"call_1","output":"42"},
      {"role":"user","content":"next"}]})");
  EXPECT_EQ(r.input_items[3]["id"], "msg_9");
  EXPECT_EQ(r.input_items[4]["id"].get<std::string>().rfind("fc_", 0), 0u);
  EXPECT_EQ(Messages(r), Json::parse(R"([
      {"role":"developer","content":"rules"},
      {"role":"user","content":"a\nb"},
      {"role":"assistant","content":"ok","tool_calls":[{"id":"call_1","type":"function",
        "function":{"name":"f","arguments":"{\"x\":1}"}}],"reasoning_content":"think"},
      {"role":"tool","content":"42","tool_call_id":"call_1"},
      {"role":"user","content":"next"}])"));
}

TEST(ResponsesRequestTest, PriorConversationComesBeforeTheInputAndInstructionsAreNotInherited) {
  ResponsesRequest first = Parse(R"({"model":"m","input":"q1"})");
  Json prior = first.input_items;
  prior.push_back(Json::parse(R"({"type":"message","id":"msg_o","role":"assistant","status":"completed",
                                  "content":[{"type":"output_text","text":"a1","annotations":[]}]})"));
  ResponsesRequest next = Parse(R"({"model":"m","input":"q2","previous_response_id":"resp_1","instructions":"new"})");
  EXPECT_EQ(next.previous_response_id, "resp_1");
  EXPECT_EQ(Messages(next, prior), Json::parse(R"([{"role":"system","content":"new"},{"role":"user","content":"q1"},
      {"role":"assistant","content":"a1"},{"role":"user","content":"q2"}])"));
}

TEST(ResponsesRequestTest, ToolsToolChoiceTextAndReasoning) {
  ResponsesRequest r = Parse(R"({"model":"m","input":"x",
      "tools":[{"type":"function","name":"get","description":"d","parameters":{"type":"object","properties":{}},"strict":true}],
      "tool_choice":{"type":"function","name":"get"},"parallel_tool_calls":false,
      "text":{"format":{"type":"json_schema","name":"s","schema":{"type":"object"},"strict":true}},
      "reasoning":{"effort":"low"}})");
  EXPECT_EQ(r.chat.tools[0]["function"]["name"], "get");
  EXPECT_EQ(r.chat.tools[0]["function"]["strict"], true);
  EXPECT_EQ(r.chat.tool_choice.mode, ToolChoiceMode::kNamed);
  EXPECT_EQ(r.chat.tool_choice.function_name, "get");
  EXPECT_FALSE(r.chat.parallel_tool_calls);
  EXPECT_EQ(r.chat.structured.kind, openai::StructuredOutputSpec::Kind::kJsonSchema);
  EXPECT_EQ(r.chat.structured.param, "text.format.schema");
  EXPECT_EQ(r.chat.template_kwargs["reasoning_effort"], "low");
  EXPECT_EQ(r.echo["tools"][0]["name"], "get");
  EXPECT_EQ(r.echo["text"]["format"]["name"], "s");
  EXPECT_EQ(Parse(R"({"model":"m","input":"x","text":{"format":{"type":"json_object"}}})").chat.structured.kind,
            openai::StructuredOutputSpec::Kind::kJsonObject);
  EXPECT_EQ(Parse(R"({"model":"m","input":"x","tools":[{"type":"function","name":"g"}],"tool_choice":"required"})")
                .chat.tool_choice.mode,
            ToolChoiceMode::kRequired);
  EXPECT_EQ(Parse(R"({"model":"m","input":"x"})").chat.tool_choice.mode, ToolChoiceMode::kNone);
}

TEST(ResponsesRequestTest, HarmlessValuesOfRefusedFieldsAreServed) {
  Parse(R"({"model":"m","input":"x","background":false,"truncation":"disabled","include":[]})");
}

TEST(ResponsesRequestTest, RefusalsNameTheField) {
  const struct {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"model":"m"})", "input"},
      {R"({"model":"m","input":"x","not_an_api_field":1})", "not_an_api_field"},
      {R"({"model":"m","input":[]})", "input"},
      {R"({"model":"m","input":[{"role":"tool","content":"x"}]})", "input[0].role"},
      {R"({"model":"m","input":[{"role":"user","content":[{"type":"input_image","image_url":"u"}]}]})",
       "input[0].content[0].type"},
      {R"({"model":"m","input":[{"role":"user","content":[{"type":"output_text","text":"u"}]}]})",
       "input[0].content[0].type"},
      {R"({"model":"m","input":[{"type":"item_reference","id":"x"}]})", "input[0].type"},
      {R"({"model":"m","input":[{"type":"function_call","name":"f","arguments":"{}"}]})", "input[0].call_id"},
      {R"({"model":"m","input":[{"type":"function_call_output","call_id":"c"}]})", "input[0].output"},
      {R"({"model":"m","input":[{"type":"reasoning","summary":[],"encrypted_content":"zz"}]})",
       "input[0].encrypted_content"},
      {R"({"model":"m","input":"x","tools":[{"type":"web_search"}]})", "tools[0].type"},
      {R"({"model":"m","input":"x","tools":[{"type":"function"}]})", "tools[0].name"},
      {R"({"model":"m","input":"x","tools":[{"type":"function","name":"f","parameters":3}]})", "tools[0].parameters"},
      {R"({"model":"m","input":"x","tool_choice":{"type":"file_search"}})", "tool_choice.type"},
      {R"({"model":"m","input":"x","tool_choice":"required"})", "tool_choice"},
      {R"({"model":"m","input":"x","text":{"format":{"type":"json_schema","name":"s"}}})", "text.format.schema"},
      {R"({"model":"m","input":"x","text":{"format":{"type":"yaml"}}})", "text.format.type"},
      {R"({"model":"m","input":"x","text":{"verbosity":"low"}})", "text.verbosity"},
      {R"({"model":"m","input":"x","reasoning":{"effort":"extreme"}})", "reasoning.effort"},
      {R"({"model":"m","input":"x","reasoning":{"summary":"auto"}})", "reasoning.summary"},
      {R"({"model":"m","input":"x","background":true})", "background"},
      {R"({"model":"m","input":"x","include":["reasoning.encrypted_content"]})", "include"},
      {R"({"model":"m","input":"x","conversation":"c"})", "conversation"},
      {R"({"model":"m","input":"x","truncation":"auto"})", "truncation"},
      {R"({"model":"m","input":"x","prompt_cache_retention":"1h"})", "prompt_cache_retention"},
      {R"({"model":"m","input":"x","max_output_tokens":0})", "max_output_tokens"},
      {R"({"model":"m","input":"x","temperature":3})", "temperature"},
      {R"({"model":"m","input":"x","metadata":{"k":1}})", "metadata"},
      {R"({"model":"m","input":"x","store":"yes"})", "store"},
      {R"({"model":"m","input":"x","previous_response_id":7})", "previous_response_id"},
  };
  for (const auto& c : cases) {
    ApiError e = Refusal(c.body);
    EXPECT_EQ(e.param, c.param) << c.body << ": " << e.message;
    EXPECT_NE(e.message.find(c.param), std::string::npos) << c.body << ": " << e.message;
    EXPECT_EQ(e.status, ApiStatus::kBadRequest) << c.body;
  }
  EXPECT_EQ(Refusal(R"({"model":"other","input":"x"})").status, ApiStatus::kNotFound);
}

}  // namespace
}  // namespace tessera::responses
