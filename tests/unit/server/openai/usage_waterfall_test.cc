// The cache waterfall as each API spells it in usage (docs/architecture.md,
// "Cache waterfall"): OpenAI's prompt_tokens_details, the Responses API's
// input_tokens_details, Anthropic's tessera_cache_details; every name
// present, the sums kept, several prompts' accounts added.
#include <gtest/gtest.h>

#include "server/anthropic/messages_response.h"
#include "server/openai/response_common.h"
#include "server/responses/response_render.h"

namespace tessera {
namespace {

openai::UsageCounter Usage() {
  openai::UsageCounter u;
  u.prompt_tokens = 40;
  u.completion_tokens = 3;
  u.cached_tokens = 32;
  u.cache_waterfall[CacheSource::kPool] = 16;
  u.cache_waterfall[CacheSource::kDisk] = 16;
  u.cache_waterfall[ComputeReason::kEvicted] = 4;
  u.cache_waterfall[ComputeReason::kTail] = 4;
  return u;
}

int64_t Sum(const nlohmann::json& o) {
  int64_t n = 0;
  for (const auto& [k, v] : o.items()) n += v.get<int64_t>();
  return n;
}

TEST(UsageWaterfallTest, OpenAiNamesEverySourceAndReason) {
  const nlohmann::json u = openai::UsageJson(Usage());
  const nlohmann::json& d = u["prompt_tokens_details"];
  EXPECT_EQ(d["cached_tokens"], 32);
  EXPECT_EQ(d["cached_tokens_details"], nlohmann::json::parse(R"({"pool":16,"host":0,"disk":16,"redis":0,"peer":0})"));
  EXPECT_EQ(d["computed_tokens_details"],
            nlohmann::json::parse(R"({"no_prefix":0,"evicted":4,"not_written":0,"routed_elsewhere":0,"tail":4})"));
  EXPECT_EQ(Sum(d["cached_tokens_details"]) + Sum(d["computed_tokens_details"]), u["prompt_tokens"]);
}

TEST(UsageWaterfallTest, WithoutAnAccountTheShapeIsUnchanged) {
  openai::UsageCounter u = Usage();
  u.cache_waterfall = {};
  EXPECT_EQ(openai::UsageJson(u)["prompt_tokens_details"], nlohmann::json::parse(R"({"cached_tokens":32})"));
  u.cached_tokens = 0;
  EXPECT_FALSE(openai::UsageJson(u).contains("prompt_tokens_details"));
}

TEST(UsageWaterfallTest, PromptsAddUp) {
  openai::UsageCounter total;
  total += Usage();
  total += Usage();
  const nlohmann::json d = openai::UsageJson(total)["prompt_tokens_details"];
  EXPECT_EQ(d["cached_tokens"], 64);
  EXPECT_EQ(d["cached_tokens_details"]["disk"], 32);
  EXPECT_EQ(d["computed_tokens_details"]["tail"], 8);
}

TEST(UsageWaterfallTest, ResponsesAndAnthropicCarryTheSameAccount) {
  const auto r = responses::UsageJson(Usage());
  EXPECT_EQ(r["input_tokens_details"]["cached_tokens"], 32);
  EXPECT_EQ(r["input_tokens_details"]["cached_tokens_details"]["disk"], 16);
  EXPECT_EQ(r["input_tokens_details"]["computed_tokens_details"]["evicted"], 4);
  const nlohmann::json a = anthropic::UsageJson(Usage());
  EXPECT_EQ(a["cache_read_input_tokens"], 32);
  EXPECT_EQ(a["input_tokens"], 8);
  EXPECT_EQ(Sum(a["tessera_cache_details"]["cached_tokens_details"]), a["cache_read_input_tokens"]);
  EXPECT_EQ(a["tessera_cache_details"]["computed_tokens_details"]["tail"], 4);
}

}  // namespace
}  // namespace tessera
