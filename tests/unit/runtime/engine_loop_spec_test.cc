// Speculative decoding through the EngineLoop (docs/architecture.md, "Batch invariance": exactness carries
// over). With n-gram and draft-model proposers and k = 1..8, greedy and seeded
// outputs are bitwise those of speculation off — alone, in a batch of 32 mixed
// requests, under chunked prefill and under preemption — because the CPU
// kernels are batch-invariant (1 + k verification rows give the logits of
// k + 1 single steps, checked directly below) and point-mass acceptance draws
// what plain decoding draws. Also: logprobs, stop ids, max_tokens, n > 1, the
// fallback when the proposer fails, and the counters behind the metrics.
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "runtime/engine_loop.h"
#include "runtime/spec/draft_model_proposer.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera {
namespace {

using testing::RandomTokens;
using testing::TempDir;

using Choices = std::vector<std::vector<int32_t>>;
using Outputs = std::map<std::string, Choices>;
constexpr int kVocab = 512;  // tiny vocabulary: verification rows and sampling stay cheap

std::string Synth(const std::string& dir, uint64_t seed, std::vector<std::string> overrides) {
  SynthOptions o;
  o.arch = "qwen3";
  o.size = "tiny";
  o.dtype = DType::kF32;
  o.out_dir = dir;
  o.seed = seed;
  overrides.push_back("vocab_size=" + std::to_string(kVocab));
  o.overrides = std::move(overrides);
  Status s = WriteSyntheticCheckpoint(o);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return dir;
}

SpeculativeConfig Ngram(int32_t k) {
  SpeculativeConfig c;
  c.method = SpecMethod::kNgram;
  c.num_speculative_tokens = k;
  c.prompt_lookup_min = 1;
  c.prompt_lookup_max = 3;
  c.max_verify_tokens = 1 << 20;  // no k policy: every sequence speculates k
  return c;
}

class SpecDecodeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    target_ = new TempDir();
    draft_ = new TempDir();
    other_vocab_ = new TempDir();
    Synth(target_->path(), 0, {});
    Synth(draft_->path(), 1, {"num_hidden_layers=1"});  // a different, smaller model
    SynthOptions o;
    o.arch = "qwen3";
    o.size = "tiny";
    o.dtype = DType::kF32;
    o.out_dir = other_vocab_->path();
    o.overrides = {"vocab_size=640"};
    ASSERT_TRUE(WriteSyntheticCheckpoint(o).ok());
  }
  static void TearDownTestSuite() {
    delete target_;
    delete draft_;
    delete other_vocab_;
  }

  static SpeculativeConfig DraftModel(int32_t k, const std::string& model = "") {
    SpeculativeConfig c;
    c.method = SpecMethod::kDraftModel;
    c.num_speculative_tokens = k;
    c.model = model.empty() ? draft_->path() : model;
    c.max_verify_tokens = 1 << 20;
    return c;
  }

  static EngineLoopOptions Options(std::optional<SpeculativeConfig> spec, int32_t max_seqs = 32, int64_t budget = 256,
                                   int32_t num_blocks = 512) {
    EngineLoopOptions o;
    o.model_dir = target_->path();
    o.num_threads = 2;
    o.scheduler.max_num_seqs = max_seqs;
    o.scheduler.max_num_batched_tokens = budget;
    o.scheduler.kv.num_blocks = num_blocks;
    o.scheduler.kv.block_size = 16;
    o.speculative = std::move(spec);
    return o;
  }

  static std::unique_ptr<EngineLoop> MakeLoop(const EngineLoopOptions& o) {
    auto loop = EngineLoop::Create(o);
    EXPECT_TRUE(loop.ok()) << loop.status().ToString();
    return loop.ok() ? std::move(loop).value() : nullptr;
  }

  // Tokens (and, when asked, logprobs) per request id and choice.
  static Outputs Run(EngineLoop& loop, const std::vector<Request>& reqs,
                     std::map<std::string, std::vector<float>>* logprobs = nullptr) {
    std::map<std::string, RequestStreamPtr> streams;
    for (const Request& r : reqs) {
      auto s = loop.Submit(r);
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      if (s.ok()) streams[r.id] = *s;
    }
    Status st = loop.RunUntilDone();
    EXPECT_TRUE(st.ok()) << st.ToString();
    Outputs out;
    for (const Request& r : reqs) {
      Choices c(static_cast<size_t>(r.params.n));
      RequestOutput o;
      while (streams[r.id]->TryNext(&o)) {
        EXPECT_TRUE(o.status.ok()) << o.status.ToString();
        c[o.index].insert(c[o.index].end(), o.token_ids.begin(), o.token_ids.end());
        if (logprobs != nullptr) {
          EXPECT_EQ(o.logprobs.size(), o.token_ids.size()) << r.id;
          for (const TokenLogprobs& l : o.logprobs) (*logprobs)[r.id].push_back(l.logprob);
        }
      }
      out[r.id] = std::move(c);
    }
    return out;
  }

  static Outputs RunFresh(const EngineLoopOptions& o, const std::vector<Request>& reqs,
                          SpecDecodeCounters* spec = nullptr) {
    auto loop = MakeLoop(o);
    if (!loop) return {};
    Outputs out = Run(*loop, reqs);
    if (spec != nullptr) *spec = loop->metrics().spec;
    return out;
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

  // A prompt that repeats a random phrase (n-gram lookup finds matches).
  static std::vector<int32_t> Repetitive(std::mt19937& rng, int len) {
    const std::vector<int32_t> phrase = RandomTokens(rng, 2 + static_cast<int>(rng() % 6), kVocab);
    std::vector<int32_t> p;
    while (static_cast<int>(p.size()) < len) p.push_back(phrase[p.size() % phrase.size()]);
    return p;
  }

  // 32 mixed requests: greedy and seeded sampling (temperature, top_p, top_k,
  // min_p, penalties), repetitive and random prompts, n = 2, stop ids,
  // min_tokens, logprobs.
  static std::vector<Request> Mixed() {
    std::mt19937 rng(99);
    std::vector<Request> reqs;
    for (int i = 0; i < 32; ++i) {
      const int len = 1 + static_cast<int>(rng() % 60);
      Request r = Greedy("r" + std::to_string(i), i % 2 ? Repetitive(rng, len) : RandomTokens(rng, len, kVocab),
                         1 + static_cast<int>(rng() % 24));
      if (i % 3 == 1) {
        r.params.temperature = 0.9f;
        r.params.seed = 1000 + i;
        if (i % 4 == 1) r.params.top_p = 0.9f;
        if (i % 4 == 3) r.params.top_k = 20;
        if (i % 5 == 2) r.params.min_p = 0.05f;
        if (i % 5 == 3) r.params.repetition_penalty = 1.1f;
      }
      if (i % 7 == 3) r.params.n = 2;
      if (i % 6 == 5) r.params.stop_token_ids = {static_cast<int32_t>(rng() % kVocab)};
      if (i % 8 == 6) r.params.min_tokens = 3;
      if (i % 5 == 4) r.params.logprobs = true;
      reqs.push_back(std::move(r));
    }
    return reqs;
  }

  static TempDir* target_;
  static TempDir* draft_;
  static TempDir* other_vocab_;
};

TempDir* SpecDecodeTest::target_ = nullptr;
TempDir* SpecDecodeTest::draft_ = nullptr;
TempDir* SpecDecodeTest::other_vocab_ = nullptr;

void ExpectExercised(const SpecDecodeCounters& c, const std::string& what) {
  EXPECT_GT(c.num_drafts, 0) << what;
  EXPECT_GT(c.num_accepted_tokens, 0) << what;
  EXPECT_LT(c.num_accepted_tokens, c.num_draft_tokens) << what << ": rejections must be exercised too";
  EXPECT_EQ(c.num_proposer_failures, 0) << what;
}

TEST_F(SpecDecodeTest, NgramMatchesOffForEveryK) {
  const std::vector<Request> reqs = Mixed();
  const Outputs off = RunFresh(Options(std::nullopt), reqs);
  for (int32_t k = 1; k <= 8; ++k) {
    SpecDecodeCounters c;
    EXPECT_EQ(off, RunFresh(Options(Ngram(k)), reqs, &c)) << "batch of 32, k = " << k;
    ExpectExercised(c, "ngram k = " + std::to_string(k));
    // Alone: a few requests each in a loop of their own.
    auto loop = MakeLoop(Options(Ngram(k)));
    for (int i = 0; i < 32; i += 5) {
      EXPECT_EQ(off.at(reqs[i].id), Run(*loop, {reqs[i]}).at(reqs[i].id)) << "alone, k = " << k << ", " << reqs[i].id;
    }
  }
}

TEST_F(SpecDecodeTest, DraftModelMatchesOffForEveryK) {
  const std::vector<Request> reqs = Mixed();
  const Outputs off = RunFresh(Options(std::nullopt), reqs);
  for (int32_t k = 1; k <= 8; ++k) {
    SpecDecodeCounters c;
    EXPECT_EQ(off, RunFresh(Options(DraftModel(k)), reqs, &c)) << "batch of 32, k = " << k;
    ExpectExercised(c, "draft model k = " + std::to_string(k));
    auto loop = MakeLoop(Options(DraftModel(k)));
    for (int i = 0; i < 32; i += 5) {
      EXPECT_EQ(off.at(reqs[i].id), Run(*loop, {reqs[i]}).at(reqs[i].id)) << "alone, k = " << k << ", " << reqs[i].id;
    }
  }
}

TEST_F(SpecDecodeTest, ChunkedPrefillAndPreemptionMatchOff) {
  const std::vector<Request> reqs = Mixed();
  const Outputs off = RunFresh(Options(std::nullopt), reqs);
  for (const SpeculativeConfig& spec : {Ngram(4), DraftModel(4), Ngram(8), DraftModel(2)}) {
    const std::string what = std::string(SpecMethodName(spec.method)) + " k = " +
                             std::to_string(spec.num_speculative_tokens);
    SpecDecodeCounters c;
    // Budgets small enough that drafts compete with prefill chunks.
    for (int64_t budget : {32, 40, 64}) {
      EXPECT_EQ(off, RunFresh(Options(spec, 32, budget), reqs, &c)) << what << ", budget " << budget;
      EXPECT_GT(c.num_drafts, 0) << what;
    }
    EXPECT_EQ(off, RunFresh(Options(spec, 4, 8), reqs)) << what << ", 4 seqs, 8-token budget";
    EngineLoopOptions timed = Options(spec);
    timed.max_step_ms = 0.2;  // time-bounded steps cut prefill chunks small
    EXPECT_EQ(off, RunFresh(timed, reqs, &c)) << what << ", time-bounded steps";
    EXPECT_GT(c.num_drafts, 0) << what;
    // 14 blocks of 16 tokens: each request fits alone, not all together.
    auto loop = MakeLoop(Options(spec, 32, 256, 14));
    EXPECT_EQ(off, Run(*loop, reqs)) << what << ", preemption";
    EXPECT_GT(loop->metrics().counters.preemptions, 0) << what;
    EXPECT_GT(loop->metrics().spec.num_drafts, 0) << what;
  }
}

TEST_F(SpecDecodeTest, LogprobsComeFromTheTarget) {
  std::mt19937 rng(3);
  std::vector<Request> reqs;
  for (int i = 0; i < 6; ++i) {
    Request r = Greedy("l" + std::to_string(i), Repetitive(rng, 20 + i), 16);
    r.params.logprobs = true;
    r.params.top_logprobs = 2;
    if (i % 2) {
      r.params.temperature = 0.8f;
      r.params.seed = 5 + i;
    }
    reqs.push_back(std::move(r));
  }
  std::map<std::string, std::vector<float>> lp_off, lp_ngram, lp_draft;
  auto off = MakeLoop(Options(std::nullopt));
  auto ngram = MakeLoop(Options(Ngram(4)));
  auto draft = MakeLoop(Options(DraftModel(3)));
  EXPECT_EQ(Run(*off, reqs, &lp_off), Run(*ngram, reqs, &lp_ngram));
  EXPECT_EQ(lp_off, lp_ngram);
  const Outputs d = Run(*draft, reqs, &lp_draft);
  EXPECT_EQ(lp_off, lp_draft);
  EXPECT_GT(ngram->metrics().spec.num_accepted_tokens, 0);
}

TEST_F(SpecDecodeTest, DraftEqualToTargetIsAlwaysAccepted) {
  std::mt19937 rng(4);
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(Greedy("g" + std::to_string(i), RandomTokens(rng, 10 + i, kVocab), 30));
  const Outputs off = RunFresh(Options(std::nullopt), reqs);
  SpecDecodeCounters c;
  EXPECT_EQ(off, RunFresh(Options(DraftModel(5, target_->path())), reqs, &c));
  EXPECT_GT(c.num_draft_tokens, 0);
  EXPECT_EQ(c.num_accepted_tokens, c.num_draft_tokens);  // greedy, same model: every draft is right
  ASSERT_EQ(c.num_accepted_tokens_per_pos.size(), 5u);
  EXPECT_EQ(c.num_accepted_tokens_per_pos[0], c.num_drafts);
  // Chunked prefill (8-token steps) and preemption: the draft's KV must still
  // mirror every prompt chunk and recompute, or its proposals would go wrong.
  for (auto [budget, blocks] : {std::pair<int64_t, int32_t>{8, 512}, {256, 9}}) {
    SpecDecodeCounters cc;
    EXPECT_EQ(off, RunFresh(Options(DraftModel(5, target_->path()), 4, budget, blocks), reqs, &cc));
    EXPECT_GT(cc.num_draft_tokens, 0);
    EXPECT_EQ(cc.num_accepted_tokens, cc.num_draft_tokens) << "budget " << budget << ", blocks " << blocks;
  }
}

// The verification pass: 1 + k tokens in one forward give the logits of k + 1
// single-token steps (what exactness relies on).
TEST_F(SpecDecodeTest, VerificationPassEqualsSingleSteps) {
  CpuBackendOptions bo;
  bo.num_threads = 2;
  std::unique_ptr<Backend> backend = MakeCpuBackend(bo);
  auto model = Model::Load(target_->path(), backend.get());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::mt19937 rng(9);
  const std::vector<int32_t> prompt = RandomTokens(rng, 21, kVocab);
  for (int k : {1, 4, 8}) {
    const std::vector<int32_t> tail = RandomTokens(rng, 1 + k, kVocab);
    auto run = [&](bool one_pass) {
      auto cache = (*model)->CreateKvCache(8, 16);
      EXPECT_TRUE(cache.ok());
      std::vector<float> all, logits;
      auto forward = [&](int64_t start, std::span<const int32_t> toks, int32_t rows) {
        ForwardBatch b;
        b.num_seqs = 1;
        b.max_blocks_per_seq = 3;
        b.block_tables = {5, 2, 7};
        for (size_t i = 0; i < toks.size(); ++i) {
          const int64_t pos = start + static_cast<int64_t>(i);
          b.token_ids.push_back(toks[i]);
          b.positions.push_back(static_cast<int32_t>(pos));
          b.token_to_seq.push_back(0);
          b.slot_mapping.push_back(b.block_tables[pos / 16] * 16 + pos % 16);
        }
        for (int32_t r = static_cast<int32_t>(toks.size()) - rows; r < static_cast<int32_t>(toks.size()); ++r) {
          b.logits_indices.push_back(r);
        }
        EXPECT_TRUE((*model)->Forward(b, cache->get(), &logits).ok());
        all.insert(all.end(), logits.begin(), logits.end());
      };
      forward(0, prompt, 0);
      if (one_pass) {
        forward(21, tail, 1 + k);
      } else {
        for (int i = 0; i <= k; ++i) forward(21 + i, std::span<const int32_t>(tail).subspan(i, 1), 1);
      }
      return all;
    };
    const std::vector<float> one = run(true), steps = run(false);
    ASSERT_EQ(one.size(), static_cast<size_t>((1 + k) * kVocab));
    EXPECT_EQ(one, steps) << "k = " << k;  // bitwise
  }
}

// A proposer that fails on some calls: those steps decode plainly; output unchanged.
class FlakyProposer : public Proposer {
 public:
  explicit FlakyProposer(std::unique_ptr<Proposer> inner) : inner_(std::move(inner)) {}
  Status Propose(std::span<const DraftInput> inputs, std::vector<Draft>* drafts) override {
    Status s = inner_->Propose(inputs, drafts);  // the draft model still ran (its state moved)
    if (++calls_ % 3 == 0) return Internal("injected draft failure");
    return s;
  }
  Status CopyBlocks(std::span<const CopyOp> copies) override { return inner_->CopyBlocks(copies); }
  void Forget(SeqId seq) override { inner_->Forget(seq); }

 private:
  std::unique_ptr<Proposer> inner_;
  int calls_ = 0;
};

TEST_F(SpecDecodeTest, FailingProposerFallsBackToPlainDecode) {
  const std::vector<Request> reqs = Mixed();
  const Outputs off = RunFresh(Options(std::nullopt), reqs);
  for (const SpeculativeConfig& spec : {DraftModel(4), Ngram(3)}) {
    EngineLoopOptions o = Options(spec);
    o.wrap_proposer = [](std::unique_ptr<Proposer> p) -> std::unique_ptr<Proposer> {
      return std::make_unique<FlakyProposer>(std::move(p));
    };
    auto loop = MakeLoop(o);
    EXPECT_EQ(off, Run(*loop, reqs)) << SpecMethodName(spec.method);
    EXPECT_GT(loop->metrics().spec.num_proposer_failures, 0);
    EXPECT_GT(loop->metrics().spec.num_accepted_tokens, 0);
  }
}

TEST_F(SpecDecodeTest, DraftWithAnotherVocabularyIsRefused) {
  auto loop = EngineLoop::Create(Options(DraftModel(2, other_vocab_->path())));
  ASSERT_FALSE(loop.ok());
  EXPECT_EQ(loop.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(loop.status().message().find("model"), std::string::npos) << loop.status().message();
  EXPECT_NE(loop.status().message().find("vocabulary"), std::string::npos) << loop.status().message();
  auto missing = EngineLoop::Create(Options(DraftModel(2, target_->path() + "/nope")));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("--speculative-config: model"), std::string::npos)
      << missing.status().message();
}

}  // namespace
}  // namespace tessera
