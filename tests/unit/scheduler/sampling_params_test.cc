#include "scheduler/sampling_params.h"

#include <gtest/gtest.h>

#include "scheduler/request.h"

namespace tessera {
namespace {

ModelLimits Limits() {
  ModelLimits l;
  l.max_model_len = 100;
  l.vocab_size = 1000;
  return l;
}

// The message names the parameter so the server can return it verbatim.
void ExpectBad(const SamplingParams& p, const std::string& param) {
  Status s = p.Validate(Limits());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << param;
  EXPECT_NE(s.message().find("'" + param + "'"), std::string::npos) << s.message();
}

TEST(SamplingParamsTest, DefaultsAreValid) { EXPECT_TRUE(SamplingParams().Validate(Limits()).ok()); }

TEST(SamplingParamsTest, RangesNameTheParameter) {
  SamplingParams p;
  p.temperature = 2.5f; ExpectBad(p, "temperature");
  p = {}; p.temperature = -0.1f; ExpectBad(p, "temperature");
  p = {}; p.top_p = 0.0f; ExpectBad(p, "top_p");
  p = {}; p.top_p = 1.01f; ExpectBad(p, "top_p");
  p = {}; p.top_k = 0; ExpectBad(p, "top_k");
  p = {}; p.top_k = -2; ExpectBad(p, "top_k");
  p = {}; p.min_p = 1.5f; ExpectBad(p, "min_p");
  p = {}; p.presence_penalty = 2.1f; ExpectBad(p, "presence_penalty");
  p = {}; p.frequency_penalty = -2.1f; ExpectBad(p, "frequency_penalty");
  p = {}; p.repetition_penalty = 0.0f; ExpectBad(p, "repetition_penalty");
  p = {}; p.logit_bias[5] = 101.0f; ExpectBad(p, "logit_bias");
  p = {}; p.logit_bias[1000] = 1.0f; ExpectBad(p, "logit_bias");
  p = {}; p.stop_token_ids = {-1}; ExpectBad(p, "stop_token_ids");
  p = {}; p.stop = {""}; ExpectBad(p, "stop");
  p = {}; p.n = 0; ExpectBad(p, "n");
  p = {}; p.n = 17; ExpectBad(p, "n");
  p = {}; p.logprobs = true; p.top_logprobs = 21; ExpectBad(p, "top_logprobs");
  p = {}; p.top_logprobs = 3; ExpectBad(p, "top_logprobs");  // needs logprobs
  p = {}; p.prompt_logprobs = 21; ExpectBad(p, "prompt_logprobs");
  p = {}; p.max_tokens = 0; ExpectBad(p, "max_tokens");
  p = {}; p.max_tokens = 4; p.min_tokens = 5; ExpectBad(p, "min_tokens");
  p = {}; p.min_tokens = -1; ExpectBad(p, "min_tokens");
}

TEST(SamplingParamsTest, EdgesAreAccepted) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.top_k = 1;
  p.min_p = 1.0f;
  p.presence_penalty = -2.0f;
  p.frequency_penalty = 2.0f;
  p.repetition_penalty = 2.0f;
  p.logit_bias = {{0, -100.0f}, {999, 100.0f}};
  p.n = 16;
  p.logprobs = true;
  p.top_logprobs = 20;
  p.prompt_logprobs = 0;
  p.max_tokens = 1;
  EXPECT_TRUE(p.Validate(Limits()).ok()) << p.Validate(Limits()).ToString();
}

TEST(SamplingParamsTest, ContextLengthIsADistinctError) {
  SamplingParams p;
  p.max_tokens = 11;
  Status s = CheckContextLength(90, p, Limits());
  EXPECT_TRUE(IsContextLengthExceeded(s)) << s.ToString();
  EXPECT_NE(s.message().find("maximum context length is 100"), std::string::npos);
  p.max_tokens = 10;
  EXPECT_TRUE(CheckContextLength(90, p, Limits()).ok());
  p.max_tokens.reset();  // unset: needs room for one token
  EXPECT_TRUE(CheckContextLength(99, p, Limits()).ok());
  EXPECT_TRUE(IsContextLengthExceeded(CheckContextLength(100, p, Limits())));
  EXPECT_EQ(ResolveMaxTokens(90, p, Limits()), 10);
  p.max_tokens = 3;
  EXPECT_EQ(ResolveMaxTokens(90, p, Limits()), 3);
}

TEST(RequestTest, ValidatesPromptAndParams) {
  Request r;
  r.id = "a";
  EXPECT_EQ(ValidateRequest(r, Limits()).code(), StatusCode::kInvalidArgument);  // empty prompt
  r.prompt_token_ids = {1, 2, 1000};
  EXPECT_NE(ValidateRequest(r, Limits()).message().find("'prompt' token 2"), std::string::npos);
  r.prompt_token_ids = {1, 2, 3};
  EXPECT_TRUE(ValidateRequest(r, Limits()).ok());
  r.params.temperature = 3.0f;
  EXPECT_EQ(ValidateRequest(r, Limits()).code(), StatusCode::kInvalidArgument);
  r.params.temperature = 1.0f;
  r.params.max_tokens = 98;
  EXPECT_TRUE(IsContextLengthExceeded(ValidateRequest(r, Limits())));
  EXPECT_STREQ(FinishReasonName(FinishReason::kLength), "length");
}

// The answer's size is bounded: prompt tokens x (prompt_logprobs + 1) entries at most.
TEST(RequestTest, BoundsPromptLogprobsEntries) {
  ModelLimits l = Limits();
  l.max_prompt_logprobs_entries = 60;
  Request r;
  r.id = "a";
  r.prompt_token_ids.assign(20, 5);
  r.params.max_tokens = 1;
  r.params.prompt_logprobs = 2;  // 60 entries: at the bound
  EXPECT_TRUE(ValidateRequest(r, l).ok());
  r.params.prompt_logprobs = 3;  // 80
  Status s = ValidateRequest(r, l);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("'prompt_logprobs'", 0), 0u) << s.message();
  l.max_prompt_logprobs_entries = 0;  // no bound
  EXPECT_TRUE(ValidateRequest(r, l).ok());
}

}  // namespace
}  // namespace tessera
