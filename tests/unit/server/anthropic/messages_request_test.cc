// ParseMessagesRequest: every field of Anthropic's Messages API, its
// translation into the chat request, and every refusal naming its field.
#include "server/anthropic/messages_request.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera::anthropic {
namespace {

using openai::tools::ToolChoiceMode;

openai::RequestLimits Limits() {
  return {.served_model_name = "m", .model = {.max_model_len = 64, .vocab_size = 100, .max_n = 4, .max_logprobs = 20}};
}

std::optional<ApiError> Parse(const std::string& body, MessagesRequest* out, bool cache_control = false,
                              bool count_tokens = false) {
  return ParseMessagesRequest(body, Limits(), {.accept_cache_control = cache_control, .count_tokens = count_tokens},
                              out);
}

const std::string kHead = R"("model":"m","max_tokens":8,)";
const std::string kMsgs = R"("messages":[{"role":"user","content":"hi"}])";

struct BadCase {
  std::string body;
  std::string param;
};

// One test over every case (SCOPED_TRACE names the body): each gtest case is
// its own ctest process, and sixty processes cost more than the checks.
std::vector<BadCase> BadCases() {
  return {
        // Top level.
        BadCase{"{" + kHead + kMsgs + R"(,"n":2})", "n"},
        BadCase{"{" + kHead + kMsgs + R"(,"service_tier":"auto"})", "service_tier"},
        BadCase{R"({"max_tokens":8,)" + kMsgs + "}", "model"},
        BadCase{R"({"model":"m",)" + kMsgs + "}", "max_tokens"},
        BadCase{R"({"model":"m","max_tokens":0,)" + kMsgs + "}", "max_tokens"},
        BadCase{R"({"model":"m","max_tokens":1.5,)" + kMsgs + "}", "max_tokens"},
        BadCase{"{" + kHead + kMsgs + R"(,"temperature":1.5})", "temperature"},
        BadCase{"{" + kHead + kMsgs + R"(,"top_p":0})", "top_p"},
        BadCase{"{" + kHead + kMsgs + R"(,"top_k":0})", "top_k"},
        BadCase{"{" + kHead + kMsgs + R"(,"top_k":1000})", "top_k"},
        BadCase{"{" + kHead + kMsgs + R"(,"stop_sequences":"x"})", "stop_sequences"},
        BadCase{"{" + kHead + kMsgs + R"(,"stop_sequences":[""]})", "stop_sequences"},
        BadCase{"{" + kHead + kMsgs + R"(,"stream":"yes"})", "stream"},
        BadCase{"{" + kHead + kMsgs + R"(,"metadata":{"user_id":5}})", "metadata.user_id"},
        BadCase{"{" + kHead + kMsgs + R"(,"metadata":{"session":"x"}})", "metadata.session"},
        BadCase{"{" + kHead + kMsgs + R"(,"cache_salt":""})", "cache_salt"},
        // system.
        BadCase{"{" + kHead + kMsgs + R"(,"system":5})", "system"},
        BadCase{"{" + kHead + kMsgs + R"(,"system":[{"type":"image"}]})", "system[0].type"},
        BadCase{"{" + kHead + kMsgs + R"(,"system":[{"type":"text"}]})", "system[0].text"},
        // messages.
        BadCase{R"({"model":"m","max_tokens":8})", "messages"},
        BadCase{R"({"model":"m","max_tokens":8,"messages":[]})", "messages"},
        BadCase{"{" + kHead + R"("messages":[{"role":"system","content":"x"}]})", "messages[0].role"},
        BadCase{"{" + kHead + R"("messages":[{"role":"user"}]})", "messages[0].content"},
        BadCase{"{" + kHead + R"("messages":[{"role":"user","content":"x","name":"a"}]})", "messages[0].name"},
        BadCase{"{" + kHead + R"("messages":[{"role":"user","content":5}]})", "messages[0].content"},
        BadCase{"{" + kHead + R"("messages":[{"role":"user","content":[{"type":"image","source":{}}]}]})",
                "messages[0].content[0].type"},
        BadCase{"{" + kHead + R"("messages":[{"role":"user","content":[{"type":"document","source":{}}]}]})",
                "messages[0].content[0].type"},
        BadCase{"{" + kHead + R"("messages":[{"role":"user","content":[{"type":"text","text":"a","citations":[]}]}]})",
                "messages[0].content[0].citations"},
        BadCase{"{" + kHead + R"("messages":[{"role":"user","content":[{"type":"tool_result"}]}]})",
                "messages[0].content[0].tool_use_id"},
        BadCase{"{" + kHead +
                    R"("messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","is_error":1}]}]})",
                "messages[0].content[0].is_error"},
        BadCase{"{" + kHead +
                    R"("messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"image"}]}]}]})",
                "messages[0].content[0].content[0].type"},
        BadCase{"{" + kHead + R"("messages":[{"role":"user","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]})",
                "messages[0].content[0].type"},
        BadCase{"{" + kHead + R"("messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":[]}]}]})",
                "messages[0].content[0].input"},
        BadCase{"{" + kHead + R"("messages":[{"role":"assistant","content":[{"type":"tool_use","name":"f","input":{}}]}]})",
                "messages[0].content[0].id"},
        BadCase{"{" + kHead + R"("messages":[{"role":"assistant","content":[{"type":"redacted_thinking","data":"x"}]}]})",
                "messages[0].content[0].type"},
        BadCase{"{" + kHead + R"("messages":[{"role":"assistant","content":[{"type":"thinking"}]}]})",
                "messages[0].content[0].thinking"},
        // cache_control: refused by default, malformed always.
        BadCase{"{" + kHead + R"("messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]}]})",
                "messages[0].content[0].cache_control"},
        BadCase{"{" + kHead + kMsgs + R"(,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}]})",
                "system[0].cache_control"},
        BadCase{"{" + kHead + R"("messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"persistent"}}]}]})",
                "messages[0].content[0].cache_control.type"},
        BadCase{"{" + kHead + R"("messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral","ttl":"2h"}}]}]})",
                "messages[0].content[0].cache_control.ttl"},
        // tools.
        BadCase{"{" + kHead + kMsgs + R"(,"tools":{}})", "tools"},
        BadCase{"{" + kHead + kMsgs + R"(,"tools":[{"input_schema":{"type":"object"}}]})", "tools[0].name"},
        BadCase{"{" + kHead + kMsgs + R"(,"tools":[{"name":"a b","input_schema":{"type":"object"}}]})", "tools[0].name"},
        BadCase{"{" + kHead + kMsgs + R"(,"tools":[{"name":"f"}]})", "tools[0].input_schema"},
        BadCase{"{" + kHead + kMsgs + R"(,"tools":[{"name":"f","input_schema":{"type":"string"}}]})",
                "tools[0].input_schema.type"},
        BadCase{"{" + kHead + kMsgs +
                    R"(,"tools":[{"name":"f","input_schema":{"type":"object","properties":{"a":{"type":"date"}}}}]})",
                "tools[0].input_schema.properties.a.type"},
        BadCase{"{" + kHead + kMsgs + R"(,"tools":[{"type":"web_search_20250305","name":"web_search"}]})", "tools[0].type"},
        BadCase{"{" + kHead + kMsgs + R"(,"tools":[{"name":"f","input_schema":{"type":"object"},"strict":true}]})",
                "tools[0].strict"},
        // tool_choice.
        BadCase{"{" + kHead + kMsgs + R"(,"tool_choice":"auto"})", "tool_choice"},
        BadCase{"{" + kHead + kMsgs + R"(,"tool_choice":{"type":"required"}})", "tool_choice.type"},
        BadCase{"{" + kHead + kMsgs + R"(,"tool_choice":{"type":"any"}})", "tool_choice"},
        BadCase{"{" + kHead + kMsgs + R"(,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool"}})",
                "tool_choice.name"},
        BadCase{"{" + kHead + kMsgs + R"(,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"tool","name":"g"}})",
                "tool_choice.name"},
        BadCase{"{" + kHead + kMsgs + R"(,"tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto","name":"f"}})",
                "tool_choice.name"},
        BadCase{"{" + kHead + kMsgs + R"(,"tool_choice":{"type":"auto","disable_parallel_tool_use":"no"}})",
                "tool_choice.disable_parallel_tool_use"},
        // thinking.
        BadCase{"{" + kHead + kMsgs + R"(,"thinking":{"type":"on"}})", "thinking.type"},
        BadCase{"{" + kHead + kMsgs + R"(,"thinking":{"type":"enabled"}})", "thinking.budget_tokens"},
        BadCase{"{" + kHead + kMsgs + R"(,"thinking":{"type":"enabled","budget_tokens":100}})", "thinking.budget_tokens"},
        BadCase{R"({"model":"m","max_tokens":2000,)" + kMsgs + R"(,"thinking":{"type":"enabled","budget_tokens":2000}})",
                "thinking.budget_tokens"},
        BadCase{"{" + kHead + kMsgs + R"(,"thinking":{"type":"disabled","budget_tokens":2000}})",
                "thinking.budget_tokens"}};
}

TEST(MessagesBadInputTest, EveryBadFieldIsA400NamingIt) {
  for (const BadCase& c : BadCases()) {
    SCOPED_TRACE(c.body);
    MessagesRequest out;
    auto err = Parse(c.body, &out);
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(err->status, ApiStatus::kBadRequest) << err->message;
    EXPECT_EQ(err->param, c.param) << err->message;
    EXPECT_NE(err->message.find(c.param), std::string::npos) << err->message;
  }
}

TEST(MessagesRequestTest, WrongModelIs404) {
  MessagesRequest out;
  auto err = Parse(R"({"model":"other","max_tokens":8,)" + kMsgs + "}", &out);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, ApiStatus::kNotFound);
}

TEST(MessagesRequestTest, TranslatesTheConversation) {
  MessagesRequest r;
  const std::string body = R"({"model":"m","max_tokens":9,"temperature":0.5,"top_p":0.9,"top_k":5,
    "stop_sequences":["END"],"stream":true,"metadata":{"user_id":"u1"},
    "system":[{"type":"text","text":"be brief"},{"type":"text","text":"be kind"}],
    "messages":[
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},
                                     {"type":"text","text":"calling"},
                                     {"type":"tool_use","id":"toolu_1","name":"f","input":{"x":1}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"42"},
                                {"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"text","text":"no"}],
                                 "is_error":true},
                                {"type":"text","text":"thanks"}]}],
    "tools":[{"name":"f","description":"d","input_schema":{"type":"object","properties":{"x":{"type":"integer"}}}}],
    "tool_choice":{"type":"tool","name":"f","disable_parallel_tool_use":true}})";
  auto err = Parse(body, &r);
  ASSERT_FALSE(err) << err->message;
  const openai::ChatRequest& c = r.chat;
  EXPECT_EQ(c.params.max_tokens, 9);
  EXPECT_FLOAT_EQ(c.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(c.params.top_p, 0.9f);
  EXPECT_EQ(c.params.top_k, 5);
  EXPECT_EQ(c.params.stop, std::vector<std::string>{"END"});
  EXPECT_TRUE(c.stream);
  EXPECT_EQ(r.user_id, "u1");
  const Json expect = Json::parse(R"([
    {"role":"system","content":"be brief\nbe kind"},
    {"role":"user","content":"a\nb"},
    {"role":"assistant","content":"calling","tool_calls":[{"id":"toolu_1","type":"function",
       "function":{"name":"f","arguments":"{\"x\":1}"}}],"reasoning_content":"hmm"},
    {"role":"tool","content":"42","tool_call_id":"toolu_1"},
    {"role":"tool","content":"Error: no","tool_call_id":"toolu_2"},
    {"role":"user","content":"thanks"}])");
  EXPECT_EQ(c.messages, expect) << c.messages.dump();
  EXPECT_EQ(c.tools, Json::parse(R"([{"type":"function","function":{"name":"f",
    "parameters":{"type":"object","properties":{"x":{"type":"integer"}}},"description":"d"}}])"));
  EXPECT_EQ(c.tool_choice.mode, ToolChoiceMode::kNamed);
  EXPECT_EQ(c.tool_choice.function_name, "f");
  EXPECT_FALSE(c.parallel_tool_calls);
  EXPECT_TRUE(c.add_generation_prompt);
  EXPECT_FALSE(c.continue_final_message);
}

TEST(MessagesRequestTest, DefaultsAndPrefill) {
  MessagesRequest r;
  ASSERT_FALSE(Parse(R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"q"},
                        {"role":"assistant","content":"The answer is"}]})",
                     &r));
  EXPECT_TRUE(r.chat.continue_final_message);  // Anthropic's prefill
  EXPECT_FALSE(r.chat.add_generation_prompt);
  EXPECT_TRUE(r.chat.tools.is_null());
  EXPECT_EQ(r.chat.tool_choice.mode, ToolChoiceMode::kNone);
  EXPECT_EQ(r.thinking, MessagesRequest::Thinking::kDefault);
  EXPECT_EQ(r.chat.template_kwargs, Json::object());
  EXPECT_FLOAT_EQ(r.chat.params.temperature, 1.0f);
  EXPECT_EQ(r.chat.params.top_k, -1);
}

TEST(MessagesRequestTest, ToolChoiceModes) {
  const std::string tools = R"(,"tools":[{"name":"f","input_schema":{"type":"object"}}])";
  const std::pair<std::string, ToolChoiceMode> cases[] = {
      {"", ToolChoiceMode::kAuto},
      {R"(,"tool_choice":{"type":"auto"})", ToolChoiceMode::kAuto},
      {R"(,"tool_choice":{"type":"any"})", ToolChoiceMode::kRequired},
      {R"(,"tool_choice":{"type":"none"})", ToolChoiceMode::kNone}};
  for (const auto& [choice, mode] : cases) {
    MessagesRequest r;
    auto err = Parse("{" + kHead + kMsgs + tools + choice + "}", &r);
    ASSERT_FALSE(err) << choice << ": " << err->message;
    EXPECT_EQ(r.chat.tool_choice.mode, mode) << choice;
    EXPECT_TRUE(r.chat.parallel_tool_calls);
  }
}

TEST(MessagesRequestTest, ThinkingSetsTheTemplateSwitch) {
  MessagesRequest on, off;
  ASSERT_FALSE(Parse(R"({"model":"m","max_tokens":4096,)" + kMsgs +
                         R"(,"thinking":{"type":"enabled","budget_tokens":1024}})",
                     &on));
  EXPECT_EQ(on.thinking, MessagesRequest::Thinking::kEnabled);
  EXPECT_EQ(on.thinking_budget_tokens, 1024);
  EXPECT_EQ(on.chat.template_kwargs, Json::parse(R"({"enable_thinking":true})"));
  ASSERT_FALSE(Parse("{" + kHead + kMsgs + R"(,"thinking":{"type":"disabled"}})", &off));
  EXPECT_EQ(off.chat.template_kwargs, Json::parse(R"({"enable_thinking":false})"));
}

TEST(MessagesRequestTest, CacheControlMarksRetainedPrefixesUnlessRefused) {
  const std::string body = "{" + kHead +
                           R"("system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral","ttl":"1h"}}],
    "messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]}],
    "tools":[{"name":"f","input_schema":{"type":"object"},"cache_control":{"type":"ephemeral","ttl":"5m"}}]})";
  MessagesRequest r;
  auto refused = Parse(body, &r);
  ASSERT_TRUE(refused);
  EXPECT_NE(refused->message.find("--cache-control refuse"), std::string::npos) << refused->message;
  auto err = Parse(body, &r, /*cache_control=*/true);
  ASSERT_FALSE(err) << err->message;
  EXPECT_EQ(r.cache_control_markers, 3);
  // Each mark covers the chat messages through its own (system = 1, messages[0] = 2), the tools' none.
  constexpr int64_t kMinute = int64_t{60} * 1000000000;
  ASSERT_EQ(r.chat.retention.marks.size(), 3u);
  EXPECT_EQ(r.chat.retention.marks[0].messages, 1);
  EXPECT_EQ(r.chat.retention.marks[0].ttl_ns, 60 * kMinute);
  EXPECT_EQ(r.chat.retention.marks[1].messages, 2);
  EXPECT_EQ(r.chat.retention.marks[1].ttl_ns, 5 * kMinute);
  EXPECT_EQ(r.chat.retention.marks[2].messages, 0);
  EXPECT_EQ(r.chat.retention.field, "system[0].cache_control");
  // Anthropic's limit: 4 marks.
  std::string five = "{" + kHead + R"("messages":[)";
  for (int i = 0; i < 5; ++i) {
    five += std::string(i ? "," : "") + R"({"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral"}}]})";
  }
  auto over = Parse(five + "]}", &r, /*cache_control=*/true);
  ASSERT_TRUE(over);
  EXPECT_EQ(over->param, "messages[4].content[0].cache_control");
}

TEST(MessagesRequestTest, CountTokensBody) {
  MessagesRequest r;
  EXPECT_FALSE(Parse(R"({"model":"m",)" + kMsgs + R"(,"system":"s"})", &r, false, /*count_tokens=*/true));
  auto err = Parse("{" + kHead + kMsgs + "}", &r, false, /*count_tokens=*/true);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "max_tokens");
}

}  // namespace
}  // namespace tessera::anthropic
