// EngineLoop exactness (docs/architecture.md, "Batch invariance", makes these bitwise): a
// request's greedy tokens are the same alone, in a batch of 32 mixed
// requests, under chunked prefill at several budgets, after preemption and
// recompute, after a prefix-cache hit, and for every n > 1 fork; seeded
// sampling reproduces across runs and batch compositions. Plus the threaded
// submit / stream / abort API.
#include "runtime/engine_loop.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "engine/batch_builder.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

using testing::MakeTinyModel;
using testing::RandomTokens;
using testing::TempDir;

using Choices = std::vector<std::vector<int32_t>>;  // tokens per choice index

class EngineLoopTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    MakeTinyModel(dir_->path(), "qwen3", DType::kF32);
  }
  static void TearDownTestSuite() { delete dir_; }

  static EngineLoopOptions Options(int32_t max_seqs = 32, int64_t budget = 256, int32_t num_blocks = 512) {
    EngineLoopOptions o;
    o.model_dir = dir_->path();
    o.num_threads = 2;
    o.scheduler.max_num_seqs = max_seqs;
    o.scheduler.max_num_batched_tokens = budget;
    o.scheduler.kv.num_blocks = num_blocks;
    o.scheduler.kv.block_size = 16;
    return o;
  }

  std::unique_ptr<EngineLoop> MakeLoop(const EngineLoopOptions& o) {
    auto loop = EngineLoop::Create(o);
    EXPECT_TRUE(loop.ok()) << loop.status().ToString();
    return loop.ok() ? std::move(loop).value() : nullptr;
  }

  // Submits every request, runs to completion offline, returns tokens per id.
  std::map<std::string, Choices> Run(EngineLoop& loop, const std::vector<Request>& reqs) {
    std::map<std::string, RequestStreamPtr> streams;
    for (const Request& r : reqs) {
      auto s = loop.Submit(r);
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      if (s.ok()) streams[r.id] = *s;
    }
    Status st = loop.RunUntilDone();
    EXPECT_TRUE(st.ok()) << st.ToString();
    std::map<std::string, Choices> out;
    for (const Request& r : reqs) {
      Choices c(static_cast<size_t>(r.params.n));
      RequestStream& s = *streams[r.id];
      EXPECT_TRUE(s.finished()) << r.id;
      RequestOutput o;
      while (s.TryNext(&o)) {
        EXPECT_TRUE(o.status.ok()) << o.status.ToString();
        c[o.index].insert(c[o.index].end(), o.token_ids.begin(), o.token_ids.end());
      }
      out[r.id] = std::move(c);
    }
    return out;
  }

  std::map<std::string, Choices> RunFresh(const EngineLoopOptions& o, const std::vector<Request>& reqs) {
    auto loop = MakeLoop(o);
    return loop ? Run(*loop, reqs) : std::map<std::string, Choices>{};
  }

  static Request Greedy(const std::string& id, std::vector<int32_t> prompt, int32_t max_tokens) {
    Request r;
    r.id = id;
    r.prompt_token_ids = std::move(prompt);
    r.params.temperature = 0.0f;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    return r;
  }

  // 32 mixed requests: greedy and seeded, various prompt/output lengths, n.
  std::vector<Request> Mixed(int vocab) {
    std::mt19937 rng(99);
    std::vector<Request> reqs;
    for (int i = 0; i < 32; ++i) {
      Request r = Greedy("r" + std::to_string(i), RandomTokens(rng, 1 + static_cast<int>(rng() % 70), vocab),
                         1 + static_cast<int>(rng() % 12));
      if (i % 3 == 1) {
        r.params.temperature = 0.9f;
        r.params.top_p = 0.9f;
        r.params.seed = 1000 + i;
      }
      if (i % 7 == 3) r.params.n = 2;
      reqs.push_back(std::move(r));
    }
    return reqs;
  }

  // Every request run alone in its own fresh loop.
  std::map<std::string, Choices> Alone(const std::vector<Request>& reqs) {
    std::map<std::string, Choices> out;
    auto loop = MakeLoop(Options());
    for (const Request& r : reqs) out[r.id] = Run(*loop, {r})[r.id];
    return out;
  }

  static TempDir* dir_;
};

TempDir* EngineLoopTest::dir_ = nullptr;

TEST_F(EngineLoopTest, BatchedAndChunkedMatchAlone) {
  auto probe = MakeLoop(Options());
  const int vocab = static_cast<int>(probe->model_config().vocab_size);
  const std::vector<Request> reqs = Mixed(vocab);
  // Alone runs share one loop: later requests may hit the prefix cache, which
  // is itself one of the equivalences under test.
  const auto alone = Alone(reqs);
  for (const auto& [id, c] : alone) {
    for (const auto& toks : c) EXPECT_FALSE(toks.empty()) << id;
  }
  EXPECT_EQ(alone, RunFresh(Options(), reqs)) << "batch of 32";
  for (int64_t budget : {40, 64, 100}) {
    EXPECT_EQ(alone, RunFresh(Options(32, budget), reqs)) << "max_num_batched_tokens " << budget;
  }
  EXPECT_EQ(alone, RunFresh(Options(4, 7), reqs)) << "4 seqs, 7-token budget";
}

TEST_F(EngineLoopTest, PreemptionAndRecomputeMatchAlone) {
  auto probe = MakeLoop(Options());
  const int vocab = static_cast<int>(probe->model_config().vocab_size);
  const std::vector<Request> reqs = Mixed(vocab);
  const auto alone = Alone(reqs);
  // 12 blocks of 16 tokens: every request fits alone (<= 82 tokens + its fork)
  // but not together.
  auto loop = MakeLoop(Options(32, 256, 12));
  EXPECT_EQ(alone, Run(*loop, reqs));
  EXPECT_GT(loop->metrics().counters.preemptions, 0);
}

TEST_F(EngineLoopTest, PrefixCacheHitMatches) {
  std::mt19937 rng(5);
  auto loop = MakeLoop(Options());
  const int vocab = static_cast<int>(loop->model_config().vocab_size);
  const std::vector<int32_t> prompt = RandomTokens(rng, 53, vocab);
  const auto first = Run(*loop, {Greedy("a", prompt, 10)});
  const int64_t hits_before = loop->metrics().counters.prefix_cache_hits;
  const auto second = Run(*loop, {Greedy("b", prompt, 10)});
  EXPECT_GE(loop->metrics().counters.prefix_cache_hits - hits_before, 48);
  EXPECT_EQ(first.at("a"), second.at("b"));
  // And with caching off, the same tokens.
  EngineLoopOptions o = Options();
  o.scheduler.kv.enable_prefix_caching = false;
  EXPECT_EQ(first.at("a"), RunFresh(o, {Greedy("c", prompt, 10)}).at("c"));
}

TEST_F(EngineLoopTest, GreedyForksAllMatchAlone) {
  std::mt19937 rng(6);
  auto loop = MakeLoop(Options());
  const int vocab = static_cast<int>(loop->model_config().vocab_size);
  for (int len : {1, 16, 21}) {  // single token, block-aligned, partial last block
    const std::vector<int32_t> prompt = RandomTokens(rng, len, vocab);
    const Choices one = Run(*loop, {Greedy("one" + std::to_string(len), prompt, 9)}).begin()->second;
    Request forks = Greedy("forks" + std::to_string(len), prompt, 9);
    forks.params.n = 4;
    const Choices four = RunFresh(Options(), {forks}).begin()->second;
    ASSERT_EQ(four.size(), 4u);
    for (const auto& c : four) EXPECT_EQ(c, one[0]) << "prompt length " << len;
  }
}

TEST_F(EngineLoopTest, SeededSamplingReproducesAcrossRunsAndBatches) {
  std::mt19937 rng(7);
  auto probe = MakeLoop(Options());
  const int vocab = static_cast<int>(probe->model_config().vocab_size);
  Request r = Greedy("s", RandomTokens(rng, 30, vocab), 16);
  r.params.temperature = 1.3f;
  r.params.seed = 4242;
  r.params.n = 3;
  const Choices a = RunFresh(Options(), {r}).at("s");
  EXPECT_EQ(a, RunFresh(Options(), {r}).at("s")) << "second run";
  std::vector<Request> batch = Mixed(vocab);
  batch.push_back(r);
  EXPECT_EQ(a, RunFresh(Options(8, 24), batch).at("s")) << "in a chunked batch";
  EXPECT_EQ(a, RunFresh(Options(32, 256, 12), batch).at("s")) << "under preemption";
  EXPECT_NE(a[0], a[1]) << "choices draw from distinct streams";
  r.params.seed = 4243;
  EXPECT_NE(a, RunFresh(Options(), {r}).at("s")) << "another seed";
}

TEST_F(EngineLoopTest, ThreadedSubmitStreamAbort) {
  auto loop = MakeLoop(Options());
  const int vocab = static_cast<int>(loop->model_config().vocab_size);
  std::mt19937 rng(8);
  const std::vector<int32_t> prompt = RandomTokens(rng, 20, vocab);
  const Choices expected = Run(*loop, {Greedy("ref", prompt, 12)}).at("ref");
  ASSERT_TRUE(loop->Start().ok());
  EXPECT_FALSE(loop->RunUntilDone().ok());

  std::vector<std::thread> clients;
  std::vector<Choices> got(6);
  for (int t = 0; t < 6; ++t) {
    clients.emplace_back([&, t] {
      Request r = Greedy("t" + std::to_string(t), prompt, 12);
      r.params.logprobs = true;
      r.params.top_logprobs = 2;
      auto s = loop->Submit(r);
      ASSERT_TRUE(s.ok());
      Choices c(1);
      RequestOutput o;
      FinishReason last = FinishReason::kNone;
      while ((*s)->Next(&o)) {
        EXPECT_EQ(o.logprobs.size(), o.token_ids.size());
        for (const auto& lp : o.logprobs) {
          EXPECT_LE(lp.logprob, 0.0f);
          EXPECT_EQ(lp.top.size(), 2u);
        }
        c[0].insert(c[0].end(), o.token_ids.begin(), o.token_ids.end());
        last = o.finish_reason;
      }
      EXPECT_EQ(last, FinishReason::kLength);
      got[t] = std::move(c);
    });
  }
  for (auto& th : clients) th.join();
  for (const auto& c : got) EXPECT_EQ(c, expected);

  // Duplicate live ids are refused; an abort ends the stream with kAbort.
  Request long_req = Greedy("long", prompt, 100000);
  long_req.params.max_tokens.reset();
  auto s = loop->Submit(long_req);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(loop->Submit(long_req).ok());
  RequestOutput o;
  ASSERT_TRUE((*s)->Next(&o));
  loop->Abort("long");
  FinishReason last = o.finish_reason;
  while ((*s)->Next(&o)) last = o.finish_reason;
  EXPECT_EQ(last, FinishReason::kAbort);
  // The id is free again once the request ended.
  for (int i = 0; i < 100 && !loop->Submit(Greedy("long", prompt, 1)).ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  loop->Stop();
  EXPECT_FALSE(loop->Submit(Greedy("late", prompt, 1)).ok());
}

TEST_F(EngineLoopTest, RejectionsAndMinTokens) {
  auto loop = MakeLoop(Options(32, 256, 4));  // 64 tokens of KV
  const int vocab = static_cast<int>(loop->model_config().vocab_size);
  std::mt19937 rng(9);
  auto s = loop->Submit(Greedy("huge", RandomTokens(rng, 60, vocab), 30));
  ASSERT_TRUE(s.ok());  // accepted by Submit; the scheduler rejects it (never fits)
  ASSERT_TRUE(loop->RunUntilDone().ok());
  RequestOutput o;
  ASSERT_TRUE((*s)->Next(&o));
  EXPECT_FALSE(o.status.ok());
  EXPECT_TRUE((*s)->finished());

  // min_tokens bans EOS: with EOS being the greedy choice it must not appear early.
  Request r = Greedy("m", RandomTokens(rng, 5, vocab), 6);
  const Choices free_run = Run(*loop, {r}).at("m");
  r.id = "m2";
  r.params.ignore_eos = false;
  r.params.min_tokens = 6;
  r.params.stop_token_ids = {free_run[0][0]};  // would stop at once without min_tokens
  const Choices banned = Run(*loop, {r}).at("m2");
  ASSERT_EQ(banned[0].size(), 6u);
  EXPECT_NE(banned[0][0], free_run[0][0]);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Prompt logprobs through the loop equal a double-precision log-softmax of the
// model's own logits (Model::Forward on the whole prompt, no scheduler), and
// are bitwise the same when the prompt is chunked or preempted and recomputed
// (each position reported exactly once).
TEST_F(EngineLoopTest, PromptLogprobsMatchModelAndSurviveChunkingAndPreemption) {
  std::mt19937 rng(77);
  const std::vector<int32_t> prompt = RandomTokens(rng, 37, 151936);
  int64_t preemptions = 0;
  auto collect = [&](const EngineLoopOptions& options, std::vector<Request> extra) {
    auto loop = MakeLoop(options);
    Request r = Greedy("p", prompt, 3);
    r.params.prompt_logprobs = 2;
    extra.insert(extra.begin(), r);
    std::map<std::string, RequestStreamPtr> streams;
    for (const Request& q : extra) streams[q.id] = *loop->Submit(q);
    EXPECT_TRUE(loop->RunUntilDone().ok());
    preemptions = loop->metrics().counters.preemptions;
    std::vector<TokenLogprobs> lps;
    RequestOutput got;
    while (streams["p"]->TryNext(&got)) {
      lps.insert(lps.end(), got.prompt_logprobs.begin(), got.prompt_logprobs.end());
    }
    return lps;
  };
  const auto alone = collect(Options(), {});
  ASSERT_EQ(alone.size(), prompt.size() - 1);

  // Independent path: the model's logits at every prompt position.
  auto backend = MakeCpuBackend({2});
  auto model = Model::Load(dir_->path(), backend.get());
  ASSERT_TRUE(model.ok());
  auto cache = (*model)->CreateKvCache(8, 16);
  BatchBuilder b(8, 16);
  BatchBuilder::Chunk c{b.AddSequence(), prompt, {}};
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(prompt.size()); ++i) c.logits_at.push_back(i);
  auto batch = b.Build({c});
  std::vector<float> logits;
  ASSERT_TRUE((*model)->Forward(*batch, cache->get(), &logits).ok());
  const int64_t vocab = (*model)->config().vocab_size;
  for (size_t p = 0; p + 1 < prompt.size(); ++p) {
    const float* row = logits.data() + p * vocab;
    double mx = row[0], sum = 0;
    for (int64_t v = 0; v < vocab; ++v) mx = std::max<double>(mx, row[v]);
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
    const double want = row[prompt[p + 1]] - mx - std::log(sum);
    EXPECT_NEAR(alone[p].logprob, want, 1e-4) << "position " << p + 1;
    ASSERT_EQ(alone[p].top.size(), 2u);
    EXPECT_EQ(alone[p].top[0].token, static_cast<int32_t>(std::max_element(row, row + vocab) - row));
  }

  auto same = [&](const std::vector<TokenLogprobs>& got, const char* what) {
    ASSERT_EQ(got.size(), alone.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].logprob, alone[i].logprob) << what << " position " << i + 1;
      EXPECT_EQ(got[i].top, alone[i].top) << what;
    }
  };
  same(collect(Options(4, 8), {}), "chunked by 8");
  // Tight blocks with competing requests force preemption and recompute.
  std::vector<Request> others;
  for (int i = 0; i < 6; ++i) others.push_back(Greedy("o" + std::to_string(i), RandomTokens(rng, 30, 151936), 20));
  same(collect(Options(8, 64, 12), others), "with preemption");
  EXPECT_GT(preemptions, 0) << "the tight block budget should have forced preemption";
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// A constraint whose matcher goes over its work budget at its third mask
// (structured/ matchers do past their time or stack bound).
class OverBudgetMatcher : public TokenMatcher {
 public:
  Status FillNextTokenMask(std::span<uint32_t> mask) override {
    if (++calls_ >= 3) return InvalidArgument("the constraint went over its per-token budget: test");
    std::fill(mask.begin(), mask.end(), ~uint32_t{0});
    return Status::Ok();
  }
  bool AcceptToken(int32_t) override { return true; }
  bool CanEnd() const override { return false; }
  bool IsComplete() const override { return false; }

 private:
  int calls_ = 0;
};

class OverBudgetConstraint : public TokenConstraint {
 public:
  std::unique_ptr<TokenMatcher> NewMatcher() const override { return std::make_unique<OverBudgetMatcher>(); }
};

// Mid-generation, a constraint over its budget ends its own request with the
// error naming the request's field; the request batched beside it is
// untouched (bitwise its tokens alone) and the KV cache is back to empty.
TEST_F(EngineLoopTest, ConstraintOverBudgetFailsOnlyItsRequest) {
  std::mt19937 rng(5);
  auto loop = MakeLoop(Options());
  const int vocab = static_cast<int>(loop->model_config().vocab_size);
  Request good = Greedy("good", RandomTokens(rng, 20, vocab), 8);
  const Choices alone = Run(*loop, {good}).at("good");
  Request bad = Greedy("bad", RandomTokens(rng, 12, vocab), 8);
  bad.params.constraint = std::make_shared<OverBudgetConstraint>();
  bad.params.constraint_field = "guided_regex";
  good.id = "good2";
  auto bs = loop->Submit(bad);
  auto gs = loop->Submit(good);
  ASSERT_TRUE(bs.ok() && gs.ok());
  ASSERT_TRUE(loop->RunUntilDone().ok());
  RequestOutput o;
  int64_t bad_tokens = 0;
  Status failed = Status::Ok();
  while ((*bs)->TryNext(&o)) {
    bad_tokens += static_cast<int64_t>(o.token_ids.size());
    if (!o.status.ok()) failed = o.status;
  }
  EXPECT_EQ(failed.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(failed.message().rfind("'guided_regex': the constraint went over its per-token budget", 0), 0u)
      << failed.message();
  EXPECT_EQ(bad_tokens, 2);  // two masks went fine
  std::vector<int32_t> got;
  while ((*gs)->TryNext(&o)) {
    EXPECT_TRUE(o.status.ok());
    got.insert(got.end(), o.token_ids.begin(), o.token_ids.end());
  }
  EXPECT_EQ(got, alone[0]);
  EXPECT_EQ(loop->metrics().gauges.kv_usage, 0.0);
}

}  // namespace
}  // namespace tessera
