// ParseCompletionRequest: every field's type/range errors name the param;
// prompt forms, defaults and the SamplingParams it fills.
#include "server/openai/completion_request.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera::openai {
namespace {

RequestLimits Limits() {
  return {.served_model_name = "m", .model = {.max_model_len = 64, .vocab_size = 100, .max_n = 4, .max_logprobs = 5}};
}

struct BadCase {
  std::string fields;  // appended to {"prompt":"hi", ...}
  std::string param;
};

class CompletionBadInputTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(CompletionBadInputTest, Returns400NamingParam) {
  const std::string body = R"({"prompt":"hi",)" + GetParam().fields + "}";
  CompletionRequest out;
  auto err = ParseCompletionRequest(body, Limits(), &out);
  ASSERT_TRUE(err.has_value()) << body;
  EXPECT_EQ(err->status, ApiStatus::kBadRequest) << body;
  EXPECT_EQ(err->param, GetParam().param) << body << " -> " << err->message;
  EXPECT_EQ(err->type, "invalid_request_error");
  if (!GetParam().param.empty()) {
    EXPECT_NE(err->message.find(GetParam().param), std::string::npos) << err->message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fields, CompletionBadInputTest,
    ::testing::Values(
        BadCase{R"("model":5)", "model"}, BadCase{R"("max_tokens":0)", "max_tokens"},
        BadCase{R"("cache_salt":"")", "cache_salt"}, BadCase{R"("cache_salt":5)", "cache_salt"},
        BadCase{R"("max_tokens":-1)", "max_tokens"}, BadCase{R"("max_tokens":1e30)", "max_tokens"},
        BadCase{R"("max_tokens":5.0)", "max_tokens"}, BadCase{R"("max_tokens":"5")", "max_tokens"},
        BadCase{R"("max_tokens":9223372036854775808)", "max_tokens"},
        BadCase{R"("max_tokens":2147483648)", "max_tokens"}, BadCase{R"("max_tokens":true)", "max_tokens"},
        BadCase{R"("temperature":3)", "temperature"}, BadCase{R"("temperature":-0.1)", "temperature"},
        BadCase{R"("temperature":"hot")", "temperature"}, BadCase{R"("temperature":1e30)", "temperature"},
        BadCase{R"("temperature":true)", "temperature"}, BadCase{R"("top_p":0)", "top_p"},
        BadCase{R"("top_p":1.5)", "top_p"}, BadCase{R"("top_k":-2)", "top_k"}, BadCase{R"("top_k":1.5)", "top_k"},
        BadCase{R"("min_p":1.1)", "min_p"}, BadCase{R"("presence_penalty":2.5)", "presence_penalty"},
        BadCase{R"("frequency_penalty":-3)", "frequency_penalty"},
        BadCase{R"("repetition_penalty":0)", "repetition_penalty"},
        BadCase{R"("repetition_penalty":2.1)", "repetition_penalty"}, BadCase{R"("seed":1.5)", "seed"},
        BadCase{R"("seed":9223372036854775808)", "seed"}, BadCase{R"("seed":"1")", "seed"},
        BadCase{R"("stop":5)", "stop"}, BadCase{R"("stop":[1])", "stop"}, BadCase{R"("stop":"")", "stop"},
        BadCase{R"("stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"])", "stop"},
        BadCase{"\"stop\":\"" + std::string(1025, 'x') + "\"", "stop"},
        BadCase{R"("stop_token_ids":[100])", "stop_token_ids"}, BadCase{R"("stop_token_ids":[-1])", "stop_token_ids"},
        BadCase{R"("stop_token_ids":"1")", "stop_token_ids"}, BadCase{R"("stop_token_ids":[1.0])", "stop_token_ids"},
        BadCase{R"("ignore_eos":1)", "ignore_eos"}, BadCase{R"("min_tokens":-1)", "min_tokens"},
        BadCase{R"("min_tokens":17)", "min_tokens"}, BadCase{R"("n":0)", "n"}, BadCase{R"("n":5)", "n"},
        BadCase{R"("n":"2")", "n"}, BadCase{R"("best_of":2)", "best_of"}, BadCase{R"("best_of":"1")", "best_of"},
        BadCase{R"("logit_bias":[1])", "logit_bias"}, BadCase{R"("logit_bias":{"abc":1})", "logit_bias"},
        BadCase{R"("logit_bias":{"100":1})", "logit_bias"}, BadCase{R"("logit_bias":{"-1":1})", "logit_bias"},
        BadCase{R"("logit_bias":{"1x":1})", "logit_bias"}, BadCase{R"("logit_bias":{"1":101})", "logit_bias"},
        BadCase{R"("logit_bias":{"1":"1"})", "logit_bias"}, BadCase{R"("priority":1.5)", "priority"},
        BadCase{R"("priority":4294967296)", "priority"}, BadCase{R"("user":5)", "user"},
        BadCase{R"("stream":"yes")", "stream"}, BadCase{R"("stream_options":{"include_usage":true})", "stream_options"},
        BadCase{R"("stream":true,"stream_options":[])", "stream_options"},
        BadCase{R"("stream":true,"stream_options":{"include_usage":1})", "stream_options.include_usage"},
        BadCase{R"("stream":true,"stream_options":{"continuous_usage_stats":"x"})",
                "stream_options.continuous_usage_stats"},
        BadCase{R"("skip_special_tokens":0)", "skip_special_tokens"},
        BadCase{R"("include_stop_str_in_output":"no")", "include_stop_str_in_output"},
        BadCase{R"("suffix":"tail")", "suffix"}, BadCase{R"("suffix":3)", "suffix"}, BadCase{R"("echo":1)", "echo"},
        BadCase{R"("logprobs":true)", "logprobs"}, BadCase{R"("logprobs":6)", "logprobs"},
        BadCase{R"("logprobs":-1)", "logprobs"}, BadCase{R"("prompt_logprobs":6)", "prompt_logprobs"},
        BadCase{R"("prompt_logprobs":-1)", "prompt_logprobs"},
        BadCase{R"("add_special_tokens":"true")", "add_special_tokens"}));

class CompletionBadPromptTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CompletionBadPromptTest, Returns400NamingPrompt) {
  const std::string body = R"({"prompt":)" + GetParam() + "}";
  CompletionRequest out;
  auto err = ParseCompletionRequest(body, Limits(), &out);
  ASSERT_TRUE(err.has_value()) << body;
  EXPECT_EQ(err->status, ApiStatus::kBadRequest);
  EXPECT_EQ(err->param, "prompt") << body << " -> " << err->message;
}

INSTANTIATE_TEST_SUITE_P(Forms, CompletionBadPromptTest,
                         ::testing::Values("null", "5", "\"\"", "[]", "[[]]", "[\"\"]", "[\"a\", 1]", "[1, \"a\"]",
                                           "[[1], 2]", "[100]", "[-1]", "[1.5]", "[[1, 100]]", "[true]", "{}",
                                           "[9223372036854775808]", "[{\"a\":1}]", "[null]"));

TEST(CompletionRequestTest, MissingPromptAndNonObjectBodies) {
  CompletionRequest out;
  auto err = ParseCompletionRequest(R"({"model":"m"})", Limits(), &out);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "prompt");
  for (const char* body : {"[]", "\"x\"", "not json", "", "{\"prompt\":"}) {
    err = ParseCompletionRequest(body, Limits(), &out);
    ASSERT_TRUE(err) << body;
    EXPECT_EQ(err->status, ApiStatus::kBadRequest);
    EXPECT_EQ(err->param, "") << body;
  }
}

TEST(CompletionRequestTest, TooManyPrompts) {
  std::string many = "[";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + "\"a\"";
  many += "]";
  CompletionRequest out;
  auto err = ParseCompletionRequest(R"({"prompt":)" + many + "}", Limits(), &out);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "prompt");
  // 64 is fine.
  many = "[";
  for (int i = 0; i < 64; ++i) many += std::string(i ? "," : "") + "[1]";
  many += "]";
  EXPECT_FALSE(ParseCompletionRequest(R"({"prompt":)" + many + "}", Limits(), &out));
  EXPECT_EQ(out.prompts.size(), 64u);
}

TEST(CompletionRequestTest, UnknownModelIs404) {
  CompletionRequest out;
  auto err = ParseCompletionRequest(R"({"model":"other","prompt":"x"})", Limits(), &out);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->status, ApiStatus::kNotFound);
  EXPECT_EQ(err->code, "model_not_found");
  EXPECT_EQ(err->param, "model");
  EXPECT_EQ(err->message, "The model `other` does not exist.");
}

TEST(CompletionRequestTest, Defaults) {
  CompletionRequest out;
  ASSERT_FALSE(ParseCompletionRequest(R"({"prompt":"hello","unknown_field":{"x":[1]}})", Limits(), &out));
  EXPECT_EQ(out.model, "m");
  ASSERT_EQ(out.prompts.size(), 1u);
  EXPECT_EQ(out.prompts[0].text, "hello");
  EXPECT_TRUE(out.prompts[0].token_ids.empty());
  EXPECT_EQ(out.params.max_tokens, 16);
  EXPECT_EQ(out.params.temperature, 1.0f);
  EXPECT_EQ(out.params.top_k, -1);
  EXPECT_EQ(out.params.n, 1);
  EXPECT_FALSE(out.params.logprobs);
  EXPECT_FALSE(out.params.prompt_logprobs.has_value());
  EXPECT_FALSE(out.stream);
  EXPECT_FALSE(out.echo);
  EXPECT_TRUE(out.add_special_tokens);
  EXPECT_TRUE(out.skip_special_tokens);
  EXPECT_FALSE(out.include_stop_str_in_output);
  EXPECT_FALSE(out.logprobs.has_value());
  EXPECT_EQ(out.cache_salt, "");
  ASSERT_FALSE(ParseCompletionRequest(R"({"prompt":"hello","cache_salt":"tenant-7"})", Limits(), &out));
  EXPECT_EQ(out.cache_salt, "tenant-7");
}

TEST(CompletionRequestTest, NullsMeanDefaultsAndNullMaxTokensIsUnbounded) {
  CompletionRequest out;
  ASSERT_FALSE(ParseCompletionRequest(
      R"({"prompt":"x","model":null,"max_tokens":null,"temperature":null,"stop":null,"n":null,"suffix":null,
          "logprobs":null,"stream_options":null})",
      Limits(), &out));
  EXPECT_FALSE(out.params.max_tokens.has_value());
  EXPECT_EQ(out.model, "m");
  EXPECT_FALSE(ParseCompletionRequest(R"({"prompt":"x","suffix":""})", Limits(), &out));
}

TEST(CompletionRequestTest, DuplicateKeysAreRefusedNamingTheKey) {
  CompletionRequest out;
  auto err = ParseCompletionRequest(R"({"prompt":"x","suffix":null,"suffix":"y"})", Limits(), &out);
  ASSERT_TRUE(err);
  EXPECT_NE(err->message.find("Duplicate key \"suffix\""), std::string::npos) << err->message;
}

TEST(CompletionRequestTest, PromptForms) {
  CompletionRequest out;
  ASSERT_FALSE(ParseCompletionRequest(R"({"prompt":["a","b"]})", Limits(), &out));
  ASSERT_EQ(out.prompts.size(), 2u);
  EXPECT_EQ(out.prompts[1].text, "b");

  ASSERT_FALSE(ParseCompletionRequest(R"({"prompt":[1,2,99]})", Limits(), &out));
  ASSERT_EQ(out.prompts.size(), 1u);
  EXPECT_FALSE(out.prompts[0].text.has_value());
  EXPECT_EQ(out.prompts[0].token_ids, (std::vector<int32_t>{1, 2, 99}));

  ASSERT_FALSE(ParseCompletionRequest(R"({"prompt":[[1],[2,3]]})", Limits(), &out));
  ASSERT_EQ(out.prompts.size(), 2u);
  EXPECT_EQ(out.prompts[1].token_ids, (std::vector<int32_t>{2, 3}));
}

TEST(CompletionRequestTest, SamplingFields) {
  CompletionRequest out;
  ASSERT_FALSE(ParseCompletionRequest(
      R"({"prompt":"x","model":"m","max_tokens":7,"temperature":0,"top_p":0.5,"top_k":0,"min_p":0.1,
          "presence_penalty":-2,"frequency_penalty":2,"repetition_penalty":1.5,"seed":-1,"stop":"END",
          "stop_token_ids":[3,4],"ignore_eos":true,"min_tokens":7,"n":2,"best_of":2,"logit_bias":{"5":-100,"7":2.5},
          "priority":-3,"user":"u","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},
          "skip_special_tokens":false,"include_stop_str_in_output":true,"echo":true,"logprobs":3,
          "prompt_logprobs":1,"add_special_tokens":false,"service_tier":"auto","metadata":{},"store":false})",
      Limits(), &out));
  const SamplingParams& p = out.params;
  EXPECT_EQ(p.max_tokens, 7);
  EXPECT_EQ(p.temperature, 0.0f);
  EXPECT_EQ(p.top_p, 0.5f);
  EXPECT_EQ(p.top_k, -1);
  EXPECT_FLOAT_EQ(p.min_p, 0.1f);
  EXPECT_EQ(p.presence_penalty, -2.0f);
  EXPECT_EQ(p.frequency_penalty, 2.0f);
  EXPECT_EQ(p.repetition_penalty, 1.5f);
  EXPECT_EQ(p.seed, UINT64_MAX);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"END"}));
  EXPECT_EQ(p.stop_token_ids, (std::vector<int32_t>{3, 4}));
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(p.min_tokens, 7);
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(p.logit_bias, (std::map<int32_t, float>{{5, -100.0f}, {7, 2.5f}}));
  EXPECT_EQ(p.priority, -3);
  EXPECT_TRUE(p.logprobs);
  EXPECT_EQ(p.top_logprobs, 3);
  EXPECT_EQ(p.prompt_logprobs, 3);  // raised to logprobs for echo
  EXPECT_EQ(out.prompt_logprobs, 1);
  EXPECT_EQ(out.logprobs, 3);
  EXPECT_TRUE(out.stream);
  EXPECT_TRUE(out.include_usage);
  EXPECT_TRUE(out.continuous_usage);
  EXPECT_FALSE(out.skip_special_tokens);
  EXPECT_TRUE(out.include_stop_str_in_output);
  EXPECT_TRUE(out.echo);
  EXPECT_FALSE(out.add_special_tokens);
}

TEST(CompletionRequestTest, StopListAndTopKOne) {
  CompletionRequest out;
  ASSERT_FALSE(ParseCompletionRequest(R"({"prompt":"x","stop":["a","b"],"top_k":1,"logprobs":0})", Limits(), &out));
  EXPECT_EQ(out.params.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(out.params.top_k, 1);
  EXPECT_TRUE(out.params.logprobs);
  EXPECT_EQ(out.params.top_logprobs, 0);
  EXPECT_EQ(out.logprobs, 0);
  EXPECT_FALSE(out.params.prompt_logprobs.has_value());  // no echo
}

TEST(CompletionRequestTest, ErrorMessageNamesParamAndValue) {
  CompletionRequest out;
  auto err = ParseCompletionRequest(R"({"prompt":"x","temperature":3})", Limits(), &out);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->message, "'temperature' must be a number in [0, 2], got 3");
}

}  // namespace
}  // namespace tessera::openai
