// Reasoning parsers: <think> splitting, whole and streamed at every split point.
#include "server/openai/tool_calls/reasoning_parser.h"

#include <gtest/gtest.h>

namespace tessera::openai::tools {
namespace {

std::pair<std::string, std::string> Parse(ReasoningParserKind kind, bool opened,
                                          const std::vector<std::string>& pieces) {
  ReasoningParser p(kind, opened);
  ReasoningSplit s;
  for (const std::string& piece : pieces) p.Feed(piece, &s);
  p.Finish(&s);
  return {s.reasoning, s.content};
}

void Expect(ReasoningParserKind kind, bool opened, const std::string& text, const std::string& reasoning,
            const std::string& content) {
  const std::pair<std::string, std::string> want{reasoning, content};
  EXPECT_EQ(Parse(kind, opened, {text}), want) << text;
  for (size_t i = 0; i <= text.size(); ++i) {
    EXPECT_EQ(Parse(kind, opened, {text.substr(0, i), text.substr(i)}), want) << text << " split at " << i;
  }
}

constexpr auto kQwen3 = ReasoningParserKind::kQwen3;
constexpr auto kR1 = ReasoningParserKind::kDeepSeekR1;

TEST(ReasoningParserTest, Qwen3) {
  Expect(kQwen3, false, "<think>\nplan a b\n</think>\n\nAnswer.", "\nplan a b\n", "Answer.");
  Expect(kQwen3, false, "\n<think>x</think>y", "x", "y");
  Expect(kQwen3, false, "No thinking here </think> at all", "", "No thinking here </think> at all");
  Expect(kQwen3, false, "<thin", "", "<thin");
  Expect(kQwen3, false, "<think>unfinished </thi", "unfinished </thi", "");
  Expect(kQwen3, true, "opened by the prompt</think>rest", "opened by the prompt", "rest");
  Expect(kQwen3, false, "<think>a</think>\n\n", "a", "");
  Expect(kQwen3, false, "<think>a</think>\n\n x \n", "a", "x \n");
}

TEST(ReasoningParserTest, DeepSeekR1StartsInsideReasoning) {
  Expect(kR1, false, "thinking</think>answer", "thinking", "answer");
  Expect(kR1, false, "<think>thinking</think>answer", "thinking", "answer");
  Expect(kR1, false, "all reasoning", "all reasoning", "");
  Expect(kR1, true, "a</think>b", "a", "b");
}

TEST(ReasoningParserTest, PromptOpensThinkAndNames) {
  EXPECT_TRUE(PromptOpensThink("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(PromptOpensThink("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(PromptOpensThink("<|im_start|>assistant\n"));
  EXPECT_EQ(*ReasoningParserFromName("qwen3"), kQwen3);
  EXPECT_EQ(*ReasoningParserFromName("deepseek_r1"), kR1);
  EXPECT_FALSE(ReasoningParserFromName("granite").ok());
}

}  // namespace
}  // namespace tessera::openai::tools
