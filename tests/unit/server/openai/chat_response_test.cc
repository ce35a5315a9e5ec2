// Chat response bodies: exact JSON for hand-built update sequences.
#include "server/openai/chat_response.h"

#include <gtest/gtest.h>

#include "tests/unit/server/openai/response_test_util.h"

namespace tessera::openai {
namespace {

using nlohmann::json;
using testing::D;
using testing::E;
using testing::U;

ChatOptions Options(bool logprobs, int32_t top_logprobs, std::string echo_prefix) {
  ChatOptions o;
  o.logprobs = logprobs;
  o.top_logprobs = top_logprobs;
  o.echo_prefix = std::move(echo_prefix);
  return o;
}

TEST(ChatAccumulatorTest, TwoChoicesWithLogprobsUsageAndStopReason) {
  ChatAccumulator acc(2, Options(true, 1, ""));
  acc.Add(U({D(0, "Hi", {E(7, "Hi", -0.5f, {E(8, "Ho", -1.0f), E(7, "Hi", -0.5f)})}),
             D(1, "", {E(9, "<", -0.25f)})},
            5, 2));
  GenerationUpdate u = U({D(1, "ok", {E(10, "ok", -0.125f)}, FinishReason::kStop), D(0, "", {}, FinishReason::kLength)},
                         5, 3, true);
  u.choices[0].stop_token_id = 2;
  u.cached_tokens = 4;
  acc.Add(u);
  json got = acc.Build("chatcmpl-1", 50, "m");
  json want = json::parse(R"({
    "id":"chatcmpl-1","object":"chat.completion","created":50,"model":"m",
    "choices":[
      {"index":0,"message":{"role":"assistant","content":"Hi"},
       "logprobs":{"content":[{"token":"Hi","logprob":-0.5,"bytes":[72,105],
                               "top_logprobs":[{"token":"Ho","logprob":-1.0,"bytes":[72,111]}]}]},
       "finish_reason":"length","stop_reason":null},
      {"index":1,"message":{"role":"assistant","content":"ok"},
       "logprobs":{"content":[{"token":"<","logprob":-0.25,"bytes":[60],"top_logprobs":[]},
                              {"token":"ok","logprob":-0.125,"bytes":[111,107],"top_logprobs":[]}]},
       "finish_reason":"stop","stop_reason":2}],
    "usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,"prompt_tokens_details":{"cached_tokens":4}}})");
  EXPECT_EQ(got, want) << got.dump(2);
}

TEST(ChatAccumulatorTest, NoLogprobsAndEchoPrefix) {
  ChatAccumulator acc(1, Options(false, 0, "Sure, "));
  ChoiceDelta d = D(0, "yes", {E(1, "yes", -1.0f)}, FinishReason::kStop);
  d.stop_string = "</s>";
  acc.Add(U({d}, 3, 1, true));
  json got = acc.Build("x", 1, "m");
  EXPECT_EQ(got["choices"], json::parse(R"([{"index":0,"message":{"role":"assistant","content":"Sure, yes"},
      "logprobs":null,"finish_reason":"stop","stop_reason":"</s>"}])"))
      << got.dump();
  EXPECT_EQ(got["usage"], json::parse(R"({"prompt_tokens":3,"completion_tokens":1,"total_tokens":4})"));
}

TEST(ChatStreamTest, RoleChunkContentChunksFinalAndUsage) {
  ChatStream s("chatcmpl-2", 60, "m", 2, Options(true, 0, ""), false);
  std::vector<json> start = s.Start();
  ASSERT_EQ(start.size(), 2u);
  EXPECT_EQ(start[1], json::parse(R"({"id":"chatcmpl-2","object":"chat.completion.chunk","created":60,"model":"m",
      "choices":[{"index":1,"delta":{"role":"assistant","content":""},"logprobs":null,
                  "finish_reason":null,"stop_reason":null}]})"))
      << start[1].dump();
  EXPECT_TRUE(s.Start().empty());

  std::vector<json> c = s.OnUpdate(U({D(0, "Hel", {E(1, "Hel", -0.5f)}), D(1, "")}, 4, 1));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0]["choices"][0], json::parse(R"({"index":0,"delta":{"content":"Hel"},
      "logprobs":{"content":[{"token":"Hel","logprob":-0.5,"bytes":[72,101,108],"top_logprobs":[]}]},
      "finish_reason":null,"stop_reason":null})"))
      << c[0].dump();

  ChoiceDelta fin = D(0, "", {}, FinishReason::kStop);
  fin.stop_string = "\n\n";
  c = s.OnUpdate(U({fin, D(1, "x", {}, FinishReason::kLength)}, 4, 2, true));
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0]["choices"][0], json::parse(R"({"index":0,"delta":{},"logprobs":{"content":[]},
      "finish_reason":"stop","stop_reason":"\n\n"})"))
      << c[0].dump();
  EXPECT_EQ(c[1]["choices"][0], json::parse(R"({"index":1,"delta":{"content":"x"},"logprobs":{"content":[]},
      "finish_reason":"length","stop_reason":null})"))
      << c[1].dump();
  EXPECT_EQ(s.UsageChunk(), json::parse(R"({"id":"chatcmpl-2","object":"chat.completion.chunk","created":60,
      "model":"m","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}})"));
}

TEST(ChatStreamTest, LazyStartEchoAndContinuousUsage) {
  ChatStream s("c", 1, "m", 1, Options(false, 0, "Pre"), /*continuous_usage=*/true);
  std::vector<json> c = s.OnUpdate(U({D(0, "x")}, 2, 1));
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0]["choices"][0]["delta"], json::parse(R"({"role":"assistant","content":""})"));
  EXPECT_EQ(c[1]["choices"][0]["delta"], json::parse(R"({"content":"Pre"})"));
  EXPECT_EQ(c[2]["choices"][0]["delta"], json::parse(R"({"content":"x"})"));
  EXPECT_EQ(c[2]["choices"][0]["logprobs"], nullptr);
  EXPECT_EQ(c[2]["usage"], json::parse(R"({"prompt_tokens":2,"completion_tokens":1,"total_tokens":3})"));
}

}  // namespace
}  // namespace tessera::openai

namespace tessera::openai {
namespace {

// return_token_ids: every update's ids ride on its last chunk of the choice,
// on an empty delta when the text is held back; the plain body has them all.
TEST(ChatStreamTest, ReturnTokenIds) {
  ChatOptions o = Options(false, 0, "");
  o.return_token_ids = true;
  ChatStream s("c", 1, "m", 1, o, false);
  (void)s.Start();
  std::vector<json> held = s.OnUpdate(U({D(0, "", {E(5, "\xe4", -1.0f)})}, 2, 1));  // text held back (UTF-8)
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0]["choices"][0]["delta"], json::object());
  EXPECT_EQ(held[0]["choices"][0]["token_ids"], json::array({5}));
  std::vector<json> last = s.OnUpdate(U({D(0, "ab", {E(6, "a", -1.0f), E(7, "b", -1.0f)}, FinishReason::kLength)},
                                        2, 3, true));
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0]["choices"][0]["delta"], json({{"content", "ab"}}));
  EXPECT_EQ(last[0]["choices"][0]["token_ids"], json::array({6, 7}));
  ChatStream plain("c", 1, "m", 1, Options(false, 0, ""), false);
  (void)plain.Start();
  EXPECT_TRUE(plain.OnUpdate(U({D(0, "", {E(5, "\xe4", -1.0f)})}, 2, 1)).empty());  // no ids asked: no chunk

  ChatAccumulator acc(1, o);
  acc.Add(U({D(0, "", {E(5, "x", -1.0f)})}, 2, 1));
  acc.Add(U({D(0, "ab", {E(6, "a", -1.0f)}, FinishReason::kStop)}, 2, 2, true));
  EXPECT_EQ(acc.Build("c", 1, "m")["choices"][0]["token_ids"], json::array({5, 6}));
  EXPECT_FALSE(ChatAccumulator(1, Options(false, 0, "")).Build("c", 1, "m")["choices"][0].contains("token_ids"));
}

}  // namespace
}  // namespace tessera::openai
