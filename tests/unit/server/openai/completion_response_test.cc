// Completions response bodies: exact JSON for hand-built update sequences.
#include "server/openai/completion_response.h"

#include <gtest/gtest.h>

#include "tests/unit/server/openai/response_test_util.h"

namespace tessera::openai {
namespace {

using nlohmann::json;
using testing::D;
using testing::E;
using testing::U;

TEST(CompletionAccumulatorTest, TwoPromptsTimesTwoChoicesIndexingUsageAndStopReason) {
  CompletionAccumulator acc(/*num_prompts=*/2, /*n=*/2, CompletionOptions{});
  // Prompt 1 finishes first; updates of the two prompts interleave.
  ChoiceDelta p1c1 = D(1, "B", {}, FinishReason::kStop);
  p1c1.stop_token_id = 2;
  acc.Add(1, U({D(0, "A", {}, FinishReason::kLength), p1c1}, 2, 2, true));
  acc.Add(0, U({D(0, "He"), D(1, "Yo")}, 3, 2));
  ChoiceDelta p0c0 = D(0, " there", {}, FinishReason::kStop);
  p0c0.stop_string = "\n";
  acc.Add(0, U({p0c0, D(1, "", {}, FinishReason::kLength)}, 3, 4, true));
  json got = acc.Build("cmpl-1", 100, "m");
  json want = json::parse(R"({
    "id":"cmpl-1","object":"text_completion","created":100,"model":"m",
    "choices":[
      {"index":0,"text":"He there","logprobs":null,"finish_reason":"stop","stop_reason":"\n"},
      {"index":1,"text":"Yo","logprobs":null,"finish_reason":"length","stop_reason":null},
      {"index":2,"text":"A","logprobs":null,"finish_reason":"length","stop_reason":null},
      {"index":3,"text":"B","logprobs":null,"finish_reason":"stop","stop_reason":2}],
    "usage":{"prompt_tokens":5,"completion_tokens":6,"total_tokens":11}})");
  EXPECT_EQ(got, want) << got.dump(2);
}

TEST(CompletionAccumulatorTest, EchoWithLogprobsAndPromptLogprobs) {
  CompletionOptions opts;
  opts.echo = true;
  opts.logprobs = 1;
  opts.prompt_logprobs = true;
  CompletionAccumulator acc(1, 1, opts);
  acc.SetPromptEcho(0, PromptEcho{"ab", E(1, "a", 0.0f)});
  GenerationUpdate u1 = U({D(0, "\xC3\xA9", {E(4, "\xC3\xA9", -0.25f, {E(4, "\xC3\xA9", -0.25f), E(5, "e", -1.5f)})})},
                          2, 1);
  u1.prompt_logprobs = {E(2, "b", -2.0f, {E(3, "c", -0.125f)})};
  u1.cached_tokens = 1;
  acc.Add(0, u1);
  acc.Add(0, U({D(0, "x", {E(6, "x", -0.5f)}, FinishReason::kLength)}, 2, 2, true));
  json got = acc.Build("cmpl-2", 7, "m");
  json want = json::parse(R"({
    "id":"cmpl-2","object":"text_completion","created":7,"model":"m",
    "choices":[{"index":0,"text":"ab\u00e9x",
      "logprobs":{"tokens":["a","b","\u00e9","x"],"token_logprobs":[null,-2.0,-0.25,-0.5],
                  "top_logprobs":[null,{"b":-2.0,"c":-0.125},{"\u00e9":-0.25},{"x":-0.5}],
                  "text_offset":[0,1,2,3]},
      "finish_reason":"length","stop_reason":null,
      "prompt_logprobs":[null,{"2":{"logprob":-2.0,"decoded_token":"b"},
                               "3":{"logprob":-0.125,"rank":1,"decoded_token":"c"}}]}],
    "usage":{"prompt_tokens":2,"completion_tokens":2,"total_tokens":4,
             "prompt_tokens_details":{"cached_tokens":1}}})");
  EXPECT_EQ(got, want) << got.dump(2);
}

TEST(CompletionAccumulatorTest, LogprobsWithoutEchoClampInfinity) {
  CompletionOptions opts;
  opts.logprobs = 0;
  CompletionAccumulator acc(1, 1, opts);
  acc.Add(0, U({D(0, "ab", {E(1, "a", -std::numeric_limits<float>::infinity()), E(2, "b", -1.0f)},
                  FinishReason::kStop)},
               1, 2, true));
  json got = acc.Build("c", 1, "m")["choices"][0]["logprobs"];
  EXPECT_EQ(got, json::parse(R"({"tokens":["a","b"],"token_logprobs":[-9999.0,-1.0],
                                 "top_logprobs":[{"a":-9999.0},{"b":-1.0}],"text_offset":[0,1]})"))
      << got.dump();
}

TEST(CompletionStreamTest, ChunksOffsetsFinishAndUsage) {
  CompletionOptions opts;
  opts.logprobs = 0;
  CompletionStream s("cmpl-3", 9, "m", 1, 1, opts, /*continuous_usage=*/true);
  std::vector<json> c1 = s.OnUpdate(0, U({D(0, "H\xC3\xA9", {E(1, "H", -0.5f), E(2, "\xC3\xA9", -1.0f)})}, 4, 2));
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_EQ(c1[0], json::parse(R"({"id":"cmpl-3","object":"text_completion","created":9,"model":"m",
      "choices":[{"index":0,"text":"H\u00e9","logprobs":{"tokens":["H","\u00e9"],"token_logprobs":[-0.5,-1.0],
                  "top_logprobs":[{"H":-0.5},{"\u00e9":-1.0}],"text_offset":[0,1]},
                  "finish_reason":null,"stop_reason":null}],
      "usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}})"))
      << c1[0].dump();
  // Nothing new: no chunk.
  EXPECT_TRUE(s.OnUpdate(0, U({D(0, "")}, 4, 2)).empty());
  ChoiceDelta last = D(0, "!", {E(3, "!", -0.25f)}, FinishReason::kStop);
  last.stop_string = "END";
  std::vector<json> c2 = s.OnUpdate(0, U({last}, 4, 3, true));
  ASSERT_EQ(c2.size(), 1u);
  EXPECT_EQ(c2[0]["choices"][0], json::parse(R"({"index":0,"text":"!","logprobs":{"tokens":["!"],
      "token_logprobs":[-0.25],"top_logprobs":[{"!":-0.25}],"text_offset":[2]},
      "finish_reason":"stop","stop_reason":"END"})"))
      << c2[0].dump();
  EXPECT_EQ(s.UsageChunk(), json::parse(R"({"id":"cmpl-3","object":"text_completion","created":9,"model":"m",
      "choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7}})"));
}

TEST(CompletionStreamTest, EchoFirstChunkAndIndexAcrossPrompts) {
  CompletionOptions opts;
  opts.echo = true;
  CompletionStream s("c", 1, "m", 2, 2, opts, false);
  s.SetPromptEcho(1, PromptEcho{"P1 ", std::nullopt});
  std::vector<json> c = s.OnUpdate(1, U({D(1, "x")}, 1, 1));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0], json::parse(R"({"id":"c","object":"text_completion","created":1,"model":"m",
      "choices":[{"index":3,"text":"P1 x","logprobs":null,"finish_reason":null,"stop_reason":null}]})"))
      << c[0].dump();
  c = s.OnUpdate(1, U({D(1, "y", {}, FinishReason::kAbort)}, 1, 2, true));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]["choices"][0]["text"], "y");
  EXPECT_EQ(c[0]["choices"][0]["finish_reason"], "abort");
  EXPECT_FALSE(c[0].contains("usage"));
}

}  // namespace
}  // namespace tessera::openai
