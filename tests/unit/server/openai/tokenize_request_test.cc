// /tokenize and /detokenize parsing and response bodies.
#include "server/openai/tokenize_request.h"

#include <gtest/gtest.h>

namespace tessera::openai {
namespace {

RequestLimits Limits() { return {.served_model_name = "m", .model = {.vocab_size = 100}}; }

TEST(TokenizeRequestTest, PromptForm) {
  TokenizeRequest out;
  ASSERT_FALSE(ParseTokenizeRequest(R"({"model":"m","prompt":"hello"})", Limits(), &out));
  EXPECT_FALSE(out.is_chat);
  EXPECT_EQ(out.prompt, "hello");
  EXPECT_TRUE(out.add_special_tokens);
  EXPECT_FALSE(out.return_token_strs);
  ASSERT_FALSE(ParseTokenizeRequest(R"({"prompt":"","add_special_tokens":false,"return_token_strs":true})",
                                    Limits(), &out));
  EXPECT_EQ(out.prompt, "");
  EXPECT_FALSE(out.add_special_tokens);
  EXPECT_TRUE(out.return_token_strs);
}

TEST(TokenizeRequestTest, ChatForm) {
  TokenizeRequest out;
  ASSERT_FALSE(ParseTokenizeRequest(
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"add_generation_prompt":false,
          "continue_final_message":true,"chat_template_kwargs":{"k":1}})",
      Limits(), &out));
  EXPECT_TRUE(out.is_chat);
  EXPECT_EQ(out.messages, Json::parse(R"([{"role":"user","content":"a"}])"));
  EXPECT_FALSE(out.add_special_tokens);
  EXPECT_FALSE(out.add_generation_prompt);
  EXPECT_TRUE(out.continue_final_message);
  EXPECT_EQ(out.template_kwargs, Json::parse(R"({"k":1})"));
  EXPECT_TRUE(out.tools.is_null());
}

TEST(TokenizeRequestTest, BadInputs) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({})", "prompt"},
      {R"({"prompt":"a","messages":[{"role":"user","content":"x"}]})", "messages"},
      {R"({"prompt":5})", "prompt"},
      {R"({"prompt":"a","add_special_tokens":"no"})", "add_special_tokens"},
      {R"({"prompt":"a","return_token_strs":1})", "return_token_strs"},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})", "messages[0].content[0].type"},
      {R"({"messages":[{"role":"user","content":"x"}],"tools":5})", "tools"},
      {R"({"messages":[{"role":"user","content":"x"}],"add_generation_prompt":true,"continue_final_message":true})",
       "continue_final_message"},
      {R"({"model":7,"prompt":"a"})", "model"},
  };
  for (const auto& [body, param] : cases) {
    TokenizeRequest out;
    auto err = ParseTokenizeRequest(body, Limits(), &out);
    ASSERT_TRUE(err) << body;
    EXPECT_EQ(err->status, ApiStatus::kBadRequest);
    EXPECT_EQ(err->param, param) << body << " -> " << err->message;
  }
  TokenizeRequest out;
  auto err = ParseTokenizeRequest(R"({"model":"zz","prompt":"a"})", Limits(), &out);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, ApiStatus::kNotFound);
  EXPECT_EQ(err->code, "model_not_found");
}

TEST(DetokenizeRequestTest, ParsesAndRejects) {
  DetokenizeRequest out;
  ASSERT_FALSE(ParseDetokenizeRequest(R"({"tokens":[0,5,99]})", Limits(), &out));
  EXPECT_EQ(out.tokens, (std::vector<int32_t>{0, 5, 99}));
  EXPECT_EQ(out.model, "m");
  ASSERT_FALSE(ParseDetokenizeRequest(R"({"tokens":[]})", Limits(), &out));
  EXPECT_TRUE(out.tokens.empty());
  for (const char* body : {R"({})", R"({"tokens":[100]})", R"({"tokens":[-1]})", R"({"tokens":[1.5]})",
                           R"({"tokens":"1"})", R"({"tokens":[9223372036854775808]})", R"({"tokens":[[1]]})"}) {
    auto err = ParseDetokenizeRequest(body, Limits(), &out);
    ASSERT_TRUE(err) << body;
    EXPECT_EQ(err->param, "tokens") << body;
  }
  EXPECT_EQ(ParseDetokenizeRequest("[1]", Limits(), &out)->param, "");
}

TEST(TokenizeResponseTest, Shapes) {
  EXPECT_EQ(TokenizeResponse({1, 2}, 4096, nullptr),
            nlohmann::json::parse(R"({"count":2,"max_model_len":4096,"tokens":[1,2]})"));
  std::vector<std::string> strs = {"a", "b"};
  EXPECT_EQ(TokenizeResponse({1, 2}, 8, &strs),
            nlohmann::json::parse(R"({"count":2,"max_model_len":8,"tokens":[1,2],"token_strs":["a","b"]})"));
  EXPECT_EQ(DetokenizeResponse("hi"), nlohmann::json::parse(R"({"prompt":"hi"})"));
}

}  // namespace
}  // namespace tessera::openai
