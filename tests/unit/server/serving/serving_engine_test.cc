// ServingEngine: text deltas equal the full decode, stop strings cut the text
// and end only their choice, notify wakes a consumer, cancel and dropping a
// Generation free its slot, limits and draining refuse with the right codes.
#include "server/serving/serving_engine.h"

#include <condition_variable>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>

#include "server/serving/metrics.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

using testing::MakeTinyModel;
using testing::TempDir;

struct Collected {
  std::vector<std::string> text;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<FinishReason> reasons;
  std::vector<std::optional<std::string>> stop_strings;
  int64_t completion_tokens = 0;
  Status status;
};

// Waits for notifications and polls until finished (bounded).
class Consumer {
 public:
  std::function<void()> Notify() {
    return [this] {
      std::lock_guard lock(mu_);
      ++notices_;
      cv_.notify_all();
    };
  }
  Collected Drain(Generation& g, int n) {
    Collected c;
    c.text.resize(n);
    c.tokens.resize(n);
    c.reasons.resize(n);
    c.stop_strings.resize(n);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    GenerationUpdate u;
    while (!g.finished() && std::chrono::steady_clock::now() < deadline) {
      {
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return notices_ > 0; });
        notices_ = 0;
      }
      while (g.Poll(&u)) {
        for (const ChoiceDelta& d : u.choices) {
          c.text[d.index] += d.text;
          c.tokens[d.index].insert(c.tokens[d.index].end(), d.token_ids.begin(), d.token_ids.end());
          if (d.finish_reason != FinishReason::kNone) c.reasons[d.index] = d.finish_reason;
          if (d.stop_string) c.stop_strings[d.index] = d.stop_string;
        }
        c.completion_tokens = u.completion_tokens;
        if (!u.status.ok()) c.status = u.status;
      }
    }
    EXPECT_TRUE(g.finished());
    return c;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int notices_ = 0;
};

class ServingEngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    MakeTinyModel(dir_->path(), "qwen3", DType::kF32);
    metrics_ = new ServingMetrics("tiny");
    ServingOptions o;
    o.loop.model_dir = dir_->path();
    o.loop.num_threads = 2;
    o.loop.scheduler.kv.num_blocks = 256;
    o.max_in_flight = 8;
    o.metrics = metrics_;
    auto e = ServingEngine::Create(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = e->release();
  }
  static void TearDownTestSuite() {
    delete engine_;
    delete metrics_;
    delete dir_;
  }
  static GenerateInput Input(const std::string& id, const std::string& prompt, int32_t max_tokens) {
    GenerateInput in;
    in.request.id = id;
    in.request.prompt_token_ids = engine_->tokenizer().Encode(prompt);
    in.request.params.temperature = 0.0f;
    in.request.params.max_tokens = max_tokens;
    in.request.params.ignore_eos = true;
    return in;
  }
  static TempDir* dir_;
  static ServingMetrics* metrics_;
  static ServingEngine* engine_;
};
TempDir* ServingEngineTest::dir_ = nullptr;
ServingMetrics* ServingEngineTest::metrics_ = nullptr;
ServingEngine* ServingEngineTest::engine_ = nullptr;

TEST_F(ServingEngineTest, TextDeltasEqualFullDecode) {
  Consumer consumer;
  auto g = engine_->Submit(Input("a", "Hello there, how are", 24), consumer.Notify());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  Collected c = consumer.Drain(**g, 1);
  ASSERT_TRUE(c.status.ok());
  ASSERT_EQ(c.tokens[0].size(), 24u);
  EXPECT_EQ(c.completion_tokens, 24);
  EXPECT_EQ(c.reasons[0], FinishReason::kLength);
  auto full = engine_->tokenizer().Decode(c.tokens[0], {.skip_special_tokens = true});
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(c.text[0], *full);
  EXPECT_EQ(engine_->num_in_flight(), 0);
}

TEST_F(ServingEngineTest, StopStringCutsTextAndEndsOnlyThatRequest) {
  // Find a stop string from an unconstrained greedy run, then ask for it.
  Consumer c1;
  auto g1 = engine_->Submit(Input("s1", "Once upon a time", 32), c1.Notify());
  ASSERT_TRUE(g1.ok());
  Collected base = c1.Drain(**g1, 1);
  ASSERT_GE(base.text[0].size(), 8u);
  const std::string stop = base.text[0].substr(base.text[0].size() / 2, 3);
  const size_t at = base.text[0].find(stop);

  for (bool include : {false, true}) {
    Consumer c2;
    GenerateInput in = Input(include ? "s3" : "s2", "Once upon a time", 32);
    in.request.params.stop = {stop};
    in.include_stop_str_in_output = include;
    auto g2 = engine_->Submit(in, c2.Notify());
    ASSERT_TRUE(g2.ok());
    Collected cut = c2.Drain(**g2, 1);
    EXPECT_EQ(cut.reasons[0], FinishReason::kStop);
    ASSERT_TRUE(cut.stop_strings[0].has_value());
    EXPECT_EQ(*cut.stop_strings[0], stop);
    EXPECT_EQ(cut.text[0], base.text[0].substr(0, at) + (include ? stop : ""));
    EXPECT_LT(cut.tokens[0].size(), base.tokens[0].size());
  }
}

TEST_F(ServingEngineTest, NChoicesAndLogprobs) {
  Consumer consumer;
  GenerateInput in = Input("n2", "The weather today", 8);
  in.request.params.n = 2;
  in.request.params.temperature = 1.0f;
  in.request.params.seed = 7;
  in.request.params.logprobs = true;
  in.request.params.top_logprobs = 3;
  auto g = engine_->Submit(in, consumer.Notify());
  ASSERT_TRUE(g.ok());
  GenerationUpdate u;
  int logprob_entries = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!(*g)->finished() && std::chrono::steady_clock::now() < deadline) {
    while ((*g)->Poll(&u)) {
      for (const ChoiceDelta& d : u.choices) {
        ASSERT_EQ(d.logprobs.size(), d.token_ids.size());
        for (size_t i = 0; i < d.logprobs.size(); ++i) {
          EXPECT_EQ(d.logprobs[i].token_id, d.token_ids[i]);
          EXPECT_LE(d.logprobs[i].logprob, 0.0f);
          EXPECT_EQ(d.logprobs[i].top.size(), 3u);
          ++logprob_entries;
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(logprob_entries, 16);
  EXPECT_EQ(u.completion_tokens, 16);
}

TEST_F(ServingEngineTest, CancelAndDropFreeTheSlot) {
  Consumer consumer;
  auto g = engine_->Submit(Input("c1", "Long story", 2000), consumer.Notify());
  ASSERT_TRUE(g.ok());
  (*g)->Cancel();
  Collected c = consumer.Drain(**g, 1);
  EXPECT_EQ(c.reasons[0], FinishReason::kAbort);
  g->reset();
  {
    auto dropped = engine_->Submit(Input("c2", "Another long story", 2000), [] {});
    ASSERT_TRUE(dropped.ok());
  }  // dropped unread: aborted
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline &&
         (engine_->num_in_flight() != 0 || engine_->scheduler_metrics().gauges.num_running != 0)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(engine_->num_in_flight(), 0);
  EXPECT_EQ(engine_->scheduler_metrics().gauges.num_running, 0);
  EXPECT_EQ(engine_->scheduler_metrics().gauges.kv_usage, 0.0);
}

TEST_F(ServingEngineTest, RefusesWithTheRightCodes) {
  // Bad input never gets here: input_processor_test.cc.
  std::vector<std::shared_ptr<Generation>> held;
  for (int i = 0; i < 8; ++i) {
    auto g = engine_->Submit(Input("h" + std::to_string(i), "hold", 2000), {});
    ASSERT_TRUE(g.ok());
    held.push_back(*g);
  }
  EXPECT_EQ(engine_->Submit(Input("over", "x", 4), {}).status().code(), StatusCode::kResourceExhausted);
  held.clear();
  EXPECT_EQ(engine_->num_in_flight(), 0);
}

TEST_F(ServingEngineTest, MetricsExposition) {
  metrics_->UpdateFromScheduler(engine_->scheduler_metrics());
  const std::string text = metrics_->Serialize();
  for (const char* name : {"tessera:time_to_first_token_seconds_bucket", "tessera:inter_token_latency_seconds",
                           "tessera:e2e_request_latency_seconds", "tessera:request_queue_time_seconds",
                           "tessera:num_requests_running", "tessera:num_requests_waiting",
                           "tessera:kv_cache_usage_perc", "tessera:prefix_cache_hits_total",
                           "tessera:prompt_tokens_total", "tessera:generation_tokens_total",
                           "tessera:num_preemptions_total", "tessera:request_success_total{finished_reason=\"length\""}) {
    EXPECT_NE(text.find(name), std::string::npos) << name;
  }
  EXPECT_NE(text.find("model_name=\"tiny\""), std::string::npos);
}

// Runs last (alphabetical order is not guaranteed; it restores nothing, so it
// only checks the refusal code).
TEST_F(ServingEngineTest, ZDrainingRefusesNewRequests) {
  engine_->BeginDrain();
  EXPECT_EQ(engine_->Submit(Input("d", "x", 4), {}).status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tessera
