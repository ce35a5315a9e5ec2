// --speculative-config parsing: vLLM's spellings accepted, every bad value
// refused with a message naming its field.
#include "runtime/spec/spec_config.h"

#include <gtest/gtest.h>

#include "runtime/spec/spec_policy.h"

namespace tessera {
namespace {

void ExpectError(const std::string& json, const std::string& field) {
  auto c = ParseSpeculativeConfig(json);
  ASSERT_FALSE(c.ok()) << json;
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find(field), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("--speculative-config"), std::string::npos) << c.status().message();
}

TEST(SpecConfigTest, NgramWithVllmDefaultsAndSpellings) {
  auto c = ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 4})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->method, SpecMethod::kNgram);
  EXPECT_EQ(c->num_speculative_tokens, 4);
  EXPECT_EQ(c->prompt_lookup_min, 5);
  EXPECT_EQ(c->prompt_lookup_max, 5);
  c = ParseSpeculativeConfig(R"({"model": "[ngram]", "num_speculative_tokens": 2, "prompt_lookup_max": 3})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->method, SpecMethod::kNgram);
  EXPECT_EQ(c->prompt_lookup_min, 3);  // one bound sets the other, as vLLM
  EXPECT_EQ(c->prompt_lookup_max, 3);
  c = ParseSpeculativeConfig(R"({"method": "ngram", "num_speculative_tokens": 8, "prompt_lookup_min": 2,
                                 "prompt_lookup_max": 6, "disable_by_batch_size": 8, "max_verify_tokens": 32})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->prompt_lookup_min, 2);
  EXPECT_EQ(c->prompt_lookup_max, 6);
  EXPECT_EQ(c->disable_by_batch_size, 8);
  EXPECT_EQ(c->max_verify_tokens, 32);
}

TEST(SpecConfigTest, DraftModel) {
  auto c = ParseSpeculativeConfig(R"({"method": "draft_model", "model": "/m/draft", "num_speculative_tokens": 3})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->method, SpecMethod::kDraftModel);
  EXPECT_EQ(c->model, "/m/draft");
  c = ParseSpeculativeConfig(R"({"model": "/m/draft", "num_speculative_tokens": 3})");  // method inferred
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->method, SpecMethod::kDraftModel);
}

TEST(SpecConfigTest, ErrorsNameTheField) {
  ExpectError(R"({"method": "ngram", "num_speculative_tokens": 0})", "num_speculative_tokens");
  ExpectError(R"({"method": "ngram", "num_speculative_tokens": -2})", "num_speculative_tokens");
  ExpectError(R"({"method": "ngram", "num_speculative_tokens": 17})", "num_speculative_tokens");
  ExpectError(R"({"method": "ngram", "num_speculative_tokens": 2.5})", "num_speculative_tokens");
  ExpectError(R"({"method": "ngram"})", "num_speculative_tokens");
  ExpectError(R"({"method": "eagle", "num_speculative_tokens": 2})", "method");
  ExpectError(R"({"method": 3, "num_speculative_tokens": 2})", "method");
  ExpectError(R"({"num_speculative_tokens": 2})", "method");
  ExpectError(R"({"method": "ngram", "num_speculative_tokens": 2, "foo": 1})", "foo");
  ExpectError(R"({"method": "ngram", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1})",
              "draft_tensor_parallel_size");
  ExpectError(R"({"method": "draft_model", "num_speculative_tokens": 2})", "model");
  ExpectError(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2})",
              "prompt_lookup_min");
  ExpectError(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 0})", "prompt_lookup_min");
  ExpectError(R"({"method": "draft_model", "model": "x", "num_speculative_tokens": 2, "prompt_lookup_max": 2})",
              "prompt_lookup_max");
  ExpectError(R"({"method": "ngram", "num_speculative_tokens": 2, "max_verify_tokens": 1})", "max_verify_tokens");
  ExpectError(R"({"method": "ngram", "num_speculative_tokens": 2, "min_draft_acceptance": 1.5})",
              "min_draft_acceptance");
  ExpectError(R"({"method": "ngram", "num_speculative_tokens": 2, "min_draft_acceptance": "x"})",
              "min_draft_acceptance");
  ExpectError(R"([1, 2])", "JSON object");
  ExpectError(R"({"method": "ngram", )", "JSON");
}

TEST(SpecPolicyTest, KShrinksAsTheBatchGrows) {
  SpeculativeConfig c;
  c.num_speculative_tokens = 8;
  c.max_verify_tokens = 64;
  EXPECT_EQ(SpeculativeTokensForBatch(c, 1), 8);
  EXPECT_EQ(SpeculativeTokensForBatch(c, 8), 7);
  EXPECT_EQ(SpeculativeTokensForBatch(c, 16), 3);
  EXPECT_EQ(SpeculativeTokensForBatch(c, 32), 1);
  EXPECT_EQ(SpeculativeTokensForBatch(c, 64), 0);
  c.disable_by_batch_size = 4;
  EXPECT_EQ(SpeculativeTokensForBatch(c, 4), 8);
  EXPECT_EQ(SpeculativeTokensForBatch(c, 5), 0);
}

TEST(SpecPolicyTest, KFollowsEachSequencesAcceptance) {
  AcceptanceEstimate fresh;
  EXPECT_EQ(fresh.Tokens(8, 0.25), 8);  // optimistic until a draft misses
  AcceptanceEstimate good;
  for (int i = 0; i < 20; ++i) good.Record(4, 4);
  EXPECT_GT(good.Rate(), 0.95);
  EXPECT_EQ(good.Tokens(8, 0.25), 8);
  AcceptanceEstimate half;  // one draft in two right: alpha^2 >= 0.2 > alpha^3
  for (int i = 0; i < 40; ++i) half.Record(1, 2);
  EXPECT_NEAR(half.Rate(), 0.5, 0.01);
  EXPECT_EQ(half.Tokens(8, 0.2), 2);
  EXPECT_EQ(half.Tokens(8, 0.0), 8);  // 0: fixed k
  EXPECT_EQ(half.Tokens(1, 0.2), 1);  // never above the batch policy's k
  AcceptanceEstimate useless;
  for (int i = 0; i < 20; ++i) useless.Record(0, 4);
  EXPECT_LT(useless.Rate(), 0.25);
  int drafted = 0;
  for (int step = 0; step < 4 * kAcceptanceProbeSteps; ++step) drafted += useless.Tokens(8, 0.25);
  EXPECT_EQ(drafted, 4);  // one single-token probe every kAcceptanceProbeSteps steps
  for (int i = 0; i < 10; ++i) useless.Record(1, 1);  // the probes start to hit
  EXPECT_GT(useless.Tokens(8, 0.25), 1);
}

}  // namespace
}  // namespace tessera
