// Speculative-decoding figures from two /metrics snapshots (tessera: and
// vllm: names), and the report section.
#include "bench/tessera_bench/spec_metrics.h"

#include <gtest/gtest.h>

namespace tessera::bench {
namespace {

TEST(SpecMetricsTest, ParsesBothPrefixesAndDiffs) {
  const std::string before = R"(# HELP tessera:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE tessera:spec_decode_num_drafts_total counter
tessera:spec_decode_num_drafts_total{model_name="m"} 10
tessera:spec_decode_num_draft_tokens_total{model_name="m"} 40
tessera:spec_decode_num_accepted_tokens_total{model_name="m"} 20
tessera:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} 9
tessera:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1"} 6
tessera:generation_tokens_total{model_name="m"} 123
)";
  const std::string after = R"(vllm:spec_decode_num_drafts_total{model_name="m"} 30
vllm:spec_decode_num_draft_tokens_total{model_name="m"} 120
vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 80
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="0"} 29
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="1"} 16
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="m",position="2"} 5
)";
  auto a = ParseSpecDecodeCounts(before), b = ParseSpecDecodeCounts(after);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->drafts, 10);
  EXPECT_EQ(a->accepted_per_pos.size(), 2u);
  auto s = SpecDecodeDelta(*a, *b);
  ASSERT_TRUE(s);
  EXPECT_DOUBLE_EQ(s->drafts, 20);
  EXPECT_DOUBLE_EQ(s->acceptance_rate, 60.0 / 80.0);
  EXPECT_DOUBLE_EQ(s->acceptance_length, 1.0 + 60.0 / 20.0);
  ASSERT_EQ(s->per_position_rate.size(), 3u);
  EXPECT_DOUBLE_EQ(s->per_position_rate[0], 1.0);
  EXPECT_DOUBLE_EQ(s->per_position_rate[2], 0.25);
  const std::string text = FormatSpecDecode(*s);
  EXPECT_NE(text.find("Acceptance length:"), std::string::npos);
  EXPECT_NE(text.find("4.00"), std::string::npos);
  EXPECT_EQ(SpecDecodeJson(*s)["acceptance_length"], 4.0);
}

TEST(SpecMetricsTest, AbsentOrIdleGivesNothing) {
  EXPECT_FALSE(ParseSpecDecodeCounts("tessera:generation_tokens_total{model_name=\"m\"} 5\n"));
  SpecDecodeCounts c;
  c.drafts = 3;
  EXPECT_FALSE(SpecDecodeDelta(c, c));  // no drafts during the run
}

}  // namespace
}  // namespace tessera::bench
