// The agentic dataset: shape (one shared system prompt and tool list, 20-40
// turns per session, each turn the previous conversation plus a tool result,
// arrivals an idle gap apart) and determinism for a seed.
#include <gtest/gtest.h>

#include <map>

#include "bench/tessera_bench/agentic.h"

namespace tessera::bench {
namespace {

AgenticOptions Small() {
  AgenticOptions o;
  o.conversations = 3;
  o.system_len = 40;
  o.num_tools = 4;
  o.tool_len = 5;
  o.input_len = 6;
  o.tool_result_len = 7;
  o.output_len = 3;
  o.idle_gap_s = 2.0;
  o.stagger_s = 0.5;
  return o;
}

TEST(AgenticDataset, SessionsGrowTurnByTurnWithIdleGaps) {
  PromptBuilder pb(nullptr);
  std::vector<double> at;
  const auto specs = AgenticDataset(Small(), pb, 11, &at);
  ASSERT_EQ(specs.size(), at.size());
  std::map<int, std::vector<size_t>> by_conv;
  for (size_t i = 0; i < specs.size(); ++i) {
    by_conv[specs[i].group].push_back(i);
    EXPECT_EQ(specs[i].system, specs[0].system);  // one agent: one system prompt and tool list
    EXPECT_EQ(specs[i].max_tokens, 3);
    if (i > 0) {
      EXPECT_LE(at[i - 1], at[i]);  // arrival order
    }
  }
  EXPECT_NE(specs[0].system.find("tool_3"), std::string::npos);
  ASSERT_EQ(by_conv.size(), 3u);
  for (const auto& [conv, idx] : by_conv) {
    EXPECT_GE(idx.size(), 20u);
    EXPECT_LE(idx.size(), 40u);
    EXPECT_DOUBLE_EQ(at[idx[0]], 0.5 * conv);
    EXPECT_EQ(specs[idx[0]].prompt.rfind("Task: ", 0), 0u);
    for (size_t t = 1; t < idx.size(); ++t) {
      const RequestSpec& prev = specs[idx[t - 1]];
      const RequestSpec& cur = specs[idx[t]];
      // This turn = the previous turn's messages, its reply (a tool call), and the tool's result.
      ASSERT_EQ(cur.history.size(), 2 * t);
      for (size_t k = 0; k < prev.history.size(); ++k) EXPECT_EQ(cur.history[k], prev.history[k]);
      EXPECT_EQ(cur.history[2 * t - 2], prev.prompt);
      EXPECT_EQ(cur.history[2 * t - 1].rfind("Calling tool_", 0), 0u);
      EXPECT_EQ(cur.prompt.rfind("Result of tool_", 0), 0u);
      EXPECT_GT(cur.prompt_tokens, prev.prompt_tokens);
      const double gap = at[idx[t]] - at[idx[t - 1]];
      EXPECT_GE(gap, 1.0);
      EXPECT_LE(gap, 3.0);
    }
  }
}

TEST(AgenticDataset, ASeedReplaysTheSameSessions) {
  PromptBuilder pb(nullptr);
  AgenticOptions o = Small();
  std::vector<double> at_a, at_b, at_c;
  const auto a = AgenticDataset(o, pb, 5, &at_a);
  const auto b = AgenticDataset(o, pb, 5, &at_b);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(at_a, at_b);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    EXPECT_EQ(a[i].history, b[i].history);
  }
  const auto c = AgenticDataset(o, pb, 6, &at_c);
  EXPECT_NE(c[0].system, a[0].system);
  o.max_requests = 10;
  const auto cut = AgenticDataset(o, pb, 5, &at_c);
  ASSERT_EQ(cut.size(), 10u);
  EXPECT_EQ(cut[9].prompt, a[9].prompt);
}

}  // namespace
}  // namespace tessera::bench
