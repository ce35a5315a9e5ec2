// --speculative-config parsing: vLLM's spellings accepted, every bad value
// refused with a message naming its field.
#include "scheduler/spec/spec_config.h"

#include <gtest/gtest.h>

#include "scheduler/spec/spec_policy.h"

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

}  // namespace
}  // namespace tessera
