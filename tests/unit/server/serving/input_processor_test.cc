// The input processor: the one place a request is validated before the
// engine (ServingEngine::Submit, the engine loop and the scheduler only check
// their own invariants). These refusals used to be asserted at those places.
#include "server/serving/input_processor.h"

#include <gtest/gtest.h>

#include "server/openai/api_error.h"

namespace tessera {
namespace {

ModelLimits Limits() { return {.max_model_len = 64, .vocab_size = 1000}; }

Request Prompt(std::vector<int32_t> ids, int32_t max_tokens) {
  Request r;
  r.prompt_token_ids = std::move(ids);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  return r;
}

StatusOr<GenerateInput> Process(Request r) { return ProcessInput(std::move(r), true, false, Limits()); }

TEST(InputProcessorTest, AcceptsAndKeepsTheTextOptions) {
  StatusOr<GenerateInput> in = ProcessInput(Prompt({1, 2, 3}, 4), false, true, Limits());
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  EXPECT_EQ(in->request.prompt_token_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(in->request.id.empty());  // the front end names it before Submit
  EXPECT_FALSE(in->skip_special_tokens);
  EXPECT_TRUE(in->include_stop_str_in_output);
}

TEST(InputProcessorTest, RefusesWithTheRightCodes) {
  Request bad = Prompt({1}, 4);
  bad.params.temperature = -1.0f;
  EXPECT_EQ(Process(bad).status().code(), StatusCode::kInvalidArgument);
  Request oov = Prompt({1}, 4);
  oov.prompt_token_ids.push_back(static_cast<int32_t>(Limits().vocab_size));
  EXPECT_EQ(Process(oov).status().code(), StatusCode::kInvalidArgument);
  Request longp = Prompt({1}, 4);
  longp.params.max_tokens = static_cast<int32_t>(Limits().max_model_len);
  EXPECT_TRUE(IsContextLengthExceeded(Process(longp).status()));
  EXPECT_FALSE(Process(Prompt({}, 4)).ok()) << "empty prompt";
}

TEST(InputProcessorTest, ExportNeedsOneChoice) {
  Request r = Prompt({10, 11, 12}, 1);
  r.export_kv = true;
  r.params.n = 2;
  EXPECT_EQ(Process(r).status().code(), StatusCode::kInvalidArgument);
}

// A refusal as the front ends send it: a 400 naming the parameter its message quotes.
TEST(InputProcessorTest, RefusalNamesItsParam) {
  Request r = Prompt({1}, 4);
  r.params.top_logprobs = 2;  // without logprobs
  StatusOr<GenerateInput> in = Process(r);
  ASSERT_FALSE(in.ok());
  ApiError err = ErrorFromStatus(in.status());
  EXPECT_EQ(err.param, "top_logprobs");
  EXPECT_EQ(err.message, "'top_logprobs' requires 'logprobs' to be true");
  r.params.top_logprobs = 0;
  EXPECT_TRUE(Process(r).ok());
}

}  // namespace
}  // namespace tessera
