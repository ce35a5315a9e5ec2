// ParseChatRequest: message validation/normalization, chat-only fields and
// their errors (each naming the param), defaults.
#include "server/openai/chat_request.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera::openai {
namespace {

RequestLimits Limits() {
  return {.served_model_name = "m", .model = {.max_model_len = 64, .vocab_size = 100, .max_n = 4, .max_logprobs = 20}};
}

struct BadCase {
  std::string body;
  std::string param;
};

class ChatBadInputTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ChatBadInputTest, Returns400NamingParam) {
  ChatRequest out;
  auto err = ParseChatRequest(GetParam().body, Limits(), &out);
  ASSERT_TRUE(err.has_value()) << GetParam().body;
  EXPECT_EQ(err->status, ApiStatus::kBadRequest);
  EXPECT_EQ(err->param, GetParam().param) << GetParam().body << " -> " << err->message;
}

const std::string kMsgs = R"("messages":[{"role":"user","content":"hi"}])";

INSTANTIATE_TEST_SUITE_P(
    Fields, ChatBadInputTest,
    ::testing::Values(
        BadCase{"{}", "messages"}, BadCase{R"({"messages":null})", "messages"},
        BadCase{R"({"messages":[]})", "messages"}, BadCase{R"({"messages":"hi"})", "messages"},
        BadCase{R"({"messages":["hi"]})", "messages[0]"},
        BadCase{R"({"messages":[{"content":"x"}]})", "messages[0].role"},
        BadCase{R"({"messages":[{"role":"user","content":"x"},{"role":"robot","content":"x"}]})",
                "messages[1].role"},
        BadCase{R"({"messages":[{"role":5,"content":"x"}]})", "messages[0].role"},
        BadCase{R"({"messages":[{"role":"user"}]})", "messages[0].content"},
        BadCase{R"({"messages":[{"role":"user","content":null}]})", "messages[0].content"},
        BadCase{R"({"messages":[{"role":"assistant","content":null}]})", "messages[0].content"},
        BadCase{R"({"messages":[{"role":"user","content":5}]})", "messages[0].content"},
        BadCase{R"({"messages":[{"role":"user","content":{"text":"x"}}]})", "messages[0].content"},
        BadCase{R"({"messages":[{"role":"user","content":["x"]}]})", "messages[0].content[0]"},
        BadCase{R"({"messages":[{"role":"user","content":[{"text":"x"}]}]})", "messages[0].content[0].type"},
        BadCase{R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{}}]}]})",
                "messages[0].content[1].type"},
        BadCase{R"({"messages":[{"role":"user","content":[{"type":"input_audio"}]}]})",
                "messages[0].content[0].type"},
        BadCase{R"({"messages":[{"role":"user","content":[{"type":"text","text":5}]}]})",
                "messages[0].content[0].text"},
        BadCase{R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})", "messages[0].content[0].text"},
        BadCase{R"({"messages":[{"role":"assistant","content":"x","tool_calls":{}}]})", "messages[0].tool_calls"},
        BadCase{R"({"messages":[{"role":"user","content":"x","name":1}]})", "messages[0].name"},
        BadCase{R"({"messages":[{"role":"tool","content":"x","tool_call_id":[]}]})", "messages[0].tool_call_id"},
        BadCase{R"({"messages":[{"role":"assistant","content":"x","reasoning_content":1}]})",
                "messages[0].reasoning_content"},
        BadCase{"{" + kMsgs + R"(,"model":["m"]})", "model"},
        BadCase{"{" + kMsgs + R"(,"max_completion_tokens":0})", "max_completion_tokens"},
        BadCase{"{" + kMsgs + R"(,"max_completion_tokens":1e30})", "max_completion_tokens"},
        BadCase{"{" + kMsgs + R"(,"max_tokens":-1})", "max_tokens"},
        BadCase{"{" + kMsgs + R"(,"max_tokens":"1"})", "max_tokens"},
        BadCase{"{" + kMsgs + R"(,"logprobs":1})", "logprobs"},
        BadCase{"{" + kMsgs + R"(,"top_logprobs":2})", "top_logprobs"},
        BadCase{"{" + kMsgs + R"(,"logprobs":false,"top_logprobs":0})", "top_logprobs"},
        BadCase{"{" + kMsgs + R"(,"logprobs":true,"top_logprobs":21})", "top_logprobs"},
        BadCase{"{" + kMsgs + R"(,"logprobs":true,"top_logprobs":-1})", "top_logprobs"},
        BadCase{"{" + kMsgs + R"(,"tools":{}})", "tools"},
        BadCase{"{" + kMsgs + R"(,"tools":[5]})", "tools[0]"},
        BadCase{"{" + kMsgs + R"(,"tools":[{"type":"code","function":{"name":"f"}}]})", "tools[0].type"},
        BadCase{"{" + kMsgs + R"(,"tools":[{"type":"function"}]})", "tools[0].function"},
        BadCase{"{" + kMsgs + R"(,"tools":[{"type":"function","function":{"name":1}}]})", "tools[0].function.name"},
        BadCase{"{" + kMsgs + R"(,"tool_choice":"required"})", "tool_choice"},
        BadCase{"{" + kMsgs + R"(,"tool_choice":{"type":"function","function":{"name":"f"}}})", "tool_choice"},
        BadCase{"{" + kMsgs + R"(,"tool_choice":"maybe"})", "tool_choice"},
        BadCase{"{" + kMsgs + R"(,"response_format":{"type":"xml"}})", "response_format.type"},
        BadCase{"{" + kMsgs + R"(,"response_format":{"type":"json_schema","json_schema":{}}})",
                "response_format.json_schema.schema"},
        BadCase{"{" + kMsgs + R"(,"guided_regex":"a","guided_choice":["a"]})", "guided_choice"},
        BadCase{"{" + kMsgs + R"(,"guided_json":"{not json"})", "guided_json"},
        BadCase{"{" + kMsgs + R"(,"structured_outputs":{}})", "structured_outputs"},
        BadCase{"{" + kMsgs + R"(,"response_format":"text"})", "response_format"},
        BadCase{"{" + kMsgs + R"(,"response_format":{}})", "response_format.type"},
        BadCase{"{" + kMsgs + R"(,"parallel_tool_calls":"yes"})", "parallel_tool_calls"},
        BadCase{"{" + kMsgs + R"(,"return_token_ids":1})", "return_token_ids"},
        BadCase{"{" + kMsgs + R"(,"kv_transfer_params":"yes"})", "kv_transfer_params"},
        BadCase{"{" + kMsgs + R"(,"kv_transfer_params":{"do_remote_prefill":true,"remote_host":"h","remote_port":0,
                "remote_request_id":"r","remote_block_ids":[1]}})",
                "kv_transfer_params.remote_port"},
        BadCase{"{" + kMsgs + R"(,"add_generation_prompt":1})", "add_generation_prompt"},
        BadCase{"{" + kMsgs + R"(,"continue_final_message":true})", "continue_final_message"},
        BadCase{"{" + kMsgs + R"(,"chat_template_kwargs":[]})", "chat_template_kwargs"},
        BadCase{"{" + kMsgs + R"(,"reasoning_effort":"maximal"})", "reasoning_effort"},
        BadCase{"{" + kMsgs + R"(,"reasoning_effort":2})", "reasoning_effort"},
        BadCase{"{" + kMsgs + R"(,"add_special_tokens":null,"echo":"x"})", "echo"},
        BadCase{"{" + kMsgs + R"(,"n":100})", "n"},
        BadCase{"{" + kMsgs + R"(,"stop_token_ids":[100]})", "stop_token_ids"},
        BadCase{"{" + kMsgs + R"(,"logit_bias":{"1000":1}})", "logit_bias"},
        BadCase{"{" + kMsgs + R"(,"min_tokens":5,"max_completion_tokens":4})", "min_tokens"},
        BadCase{"{" + kMsgs + R"(,"stream":false,"stream_options":{}})", "stream_options"}));

TEST(ChatRequestTest, ImagePartMessageNamesParam) {
  ChatRequest out;
  auto err = ParseChatRequest(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"}]}]})", Limits(), &out);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "messages[0].content[1].type");
  EXPECT_EQ(err->message,
            "only text content parts are supported: 'messages[0].content[1].type' must be \"text\", got \"image_url\"");
}

TEST(ChatRequestTest, UnknownModelIs404) {
  ChatRequest out;
  auto err = ParseChatRequest(R"({"model":"x","messages":[{"role":"user","content":"hi"}]})", Limits(), &out);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, ApiStatus::kNotFound);
  EXPECT_EQ(err->code, "model_not_found");
  EXPECT_EQ(err->param, "model");
}

TEST(ChatRequestTest, DefaultsAndNormalization) {
  ChatRequest out;
  ASSERT_FALSE(ParseChatRequest(
      R"({"messages":[
            {"role":"system","content":"be brief","extra":1},
            {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],"name":"bob"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}],"reasoning_content":"hmm"},
            {"role":"tool","content":"42","tool_call_id":"c1"},
            {"role":"developer","content":"d"}]})",
      Limits(), &out));
  const Json want = Json::parse(R"([
      {"role":"system","content":"be brief"},
      {"role":"user","content":"a\nb","name":"bob"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}],"reasoning_content":"hmm"},
      {"role":"tool","content":"42","tool_call_id":"c1"},
      {"role":"developer","content":"d"}])");
  EXPECT_EQ(out.messages, want) << out.messages.dump();
  EXPECT_EQ(out.model, "m");
  EXPECT_TRUE(out.tools.is_null());
  EXPECT_EQ(out.template_kwargs, Json::object());
  EXPECT_TRUE(out.add_generation_prompt);
  EXPECT_FALSE(out.continue_final_message);
  EXPECT_FALSE(out.add_special_tokens);
  EXPECT_FALSE(out.echo);
  EXPECT_FALSE(out.params.max_tokens.has_value());
  EXPECT_FALSE(out.logprobs);
  EXPECT_FALSE(out.params.logprobs);
  EXPECT_EQ(out.top_logprobs, 0);
  EXPECT_TRUE(out.skip_special_tokens);
  EXPECT_FALSE(out.stream);
}

TEST(ChatRequestTest, ChatFields) {
  ChatRequest out;
  ASSERT_FALSE(ParseChatRequest(
      R"({"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure"}],
          "max_tokens":9,"max_completion_tokens":5,"logprobs":true,"top_logprobs":3,
          "tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"tool_choice":"auto",
          "response_format":{"type":"text"},"parallel_tool_calls":false,"add_generation_prompt":false,
          "continue_final_message":true,"chat_template_kwargs":{"enable_thinking":false},
          "add_special_tokens":true,"echo":true,"stream":true,"stream_options":{"include_usage":true}})",
      Limits(), &out));
  EXPECT_EQ(out.params.max_tokens, 5);
  EXPECT_TRUE(out.logprobs);
  EXPECT_EQ(out.top_logprobs, 3);
  EXPECT_TRUE(out.params.logprobs);
  EXPECT_EQ(out.params.top_logprobs, 3);
  EXPECT_EQ(out.tools, Json::parse(R"([{"type":"function","function":{"name":"f","parameters":{}}}])"));
  EXPECT_FALSE(out.add_generation_prompt);
  EXPECT_TRUE(out.continue_final_message);
  EXPECT_EQ(out.template_kwargs, Json::parse(R"({"enable_thinking":false})"));
  EXPECT_TRUE(out.add_special_tokens);
  EXPECT_TRUE(out.echo);
  EXPECT_TRUE(out.stream);
  EXPECT_TRUE(out.include_usage);
  EXPECT_FALSE(out.continuous_usage);
  EXPECT_EQ(ChatEchoPrefix(out), "Sure");
}

TEST(ChatRequestTest, ReasoningEffortIsATemplateVariableUnlessTheKwargsSetIt) {
  const std::string msgs = R"("model":"m","messages":[{"role":"user","content":"hi"}])";
  ChatRequest out;
  ASSERT_FALSE(ParseChatRequest("{" + msgs + R"(,"reasoning_effort":"high"})", Limits(), &out));
  EXPECT_EQ(out.template_kwargs, Json::parse(R"({"reasoning_effort":"high"})"));
  ASSERT_FALSE(ParseChatRequest(
      "{" + msgs + R"(,"reasoning_effort":"low","chat_template_kwargs":{"reasoning_effort":"medium"}})", Limits(),
      &out));
  EXPECT_EQ(out.template_kwargs, Json::parse(R"({"reasoning_effort":"medium"})"));
  ASSERT_FALSE(ParseChatRequest("{" + msgs + R"(,"reasoning_effort":null})", Limits(), &out));
  EXPECT_EQ(out.template_kwargs, Json::object());
}

TEST(ChatRequestTest, MaxTokensFallbackAndEchoIgnoredWithoutContinue) {
  ChatRequest out;
  ASSERT_FALSE(ParseChatRequest(
      R"({"messages":[{"role":"assistant","content":"Sure"}],"max_tokens":9,"echo":true,"tool_choice":"none"})",
      Limits(), &out));
  EXPECT_EQ(out.params.max_tokens, 9);
  EXPECT_EQ(ChatEchoPrefix(out), "");
}

TEST(ChatRequestTest, ToolRoleMayHaveNullContent) {
  ChatRequest out;
  ASSERT_FALSE(ParseChatRequest(R"({"messages":[{"role":"tool","tool_call_id":"x"}]})", Limits(), &out));
  EXPECT_TRUE(out.messages[0]["content"].is_null());
}

}  // namespace
}  // namespace tessera::openai

namespace tessera::openai {
namespace {

// Disaggregation on chat (as on /v1/completions): vLLM's kv_transfer_params
// and return_token_ids are parsed, not refused.
TEST(ChatRequestTest, KvTransferParamsAndReturnTokenIds) {
  ChatRequest out;
  auto err = ParseChatRequest(R"({"messages":[{"role":"user","content":"hi"}],"return_token_ids":true,
      "kv_transfer_params":{"do_remote_prefill":true,"remote_host":"10.0.0.1","remote_port":7000,
                            "remote_request_id":"cmpl-1-0","remote_engine_id":"e","remote_block_ids":[3,4]}})",
                              Limits(), &out);
  ASSERT_FALSE(err.has_value()) << err->message;
  EXPECT_TRUE(out.return_token_ids);
  ASSERT_TRUE(out.kv_transfer.remote.has_value());
  EXPECT_EQ(out.kv_transfer.remote->host, "10.0.0.1");
  EXPECT_EQ(out.kv_transfer.remote->port, 7000);
  EXPECT_EQ(out.kv_transfer.remote->handle, "cmpl-1-0");
  EXPECT_EQ(out.kv_transfer.remote->block_ids, (std::vector<int32_t>{3, 4}));
  EXPECT_FALSE(out.kv_transfer.do_remote_decode);
  err = ParseChatRequest(R"({"messages":[{"role":"user","content":"hi"}],
      "kv_transfer_params":{"do_remote_decode":true}})", Limits(), &out);
  ASSERT_FALSE(err.has_value()) << err->message;
  EXPECT_TRUE(out.kv_transfer.do_remote_decode);
  EXPECT_FALSE(out.return_token_ids);
}

}  // namespace
}  // namespace tessera::openai
