#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>

namespace tessera {
namespace {

constexpr int32_t kEos = 2;

SchedulerOptions Options(int32_t blocks, int32_t block_size = 4) {
  SchedulerOptions o;
  o.max_num_seqs = 4;
  o.max_num_batched_tokens = 16;
  o.kv = {blocks, block_size, true};
  o.limits.max_model_len = 1 << 16;
  o.limits.vocab_size = 1000;
  o.eos_token_ids = {kEos};
  return o;
}

std::unique_ptr<Scheduler> Make(const SchedulerOptions& o) {
  auto s = Scheduler::Create(o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

Request Req(const std::string& id, int prompt_len, int max_tokens, int first_token = 10) {
  Request r;
  r.id = id;
  for (int i = 0; i < prompt_len; ++i) r.prompt_token_ids.push_back(10 + (first_token + i) % 900);
  r.params.max_tokens = max_tokens;
  return r;
}

struct StepResult {
  SchedulerOutput plan;
  std::vector<SequenceOutput> outputs;
};

// One step with a fake executor: every sampled sequence gets `token`.
StepResult Step(Scheduler& s, const std::function<int32_t(const ScheduledSequence&)>& token =
                                  [](const ScheduledSequence&) { return 7; }) {
  StepResult r;
  r.plan = s.Schedule();
  std::vector<SampledTokens> sampled;
  for (const ScheduledSequence& ss : r.plan.seqs) {
    if (ss.sample) sampled.push_back({ss.seq_id, {token(ss)}});
  }
  auto out = s.UpdateFromOutput(sampled);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  if (out.ok()) r.outputs = std::move(out).value();
  return r;
}

const ScheduledSequence* Find(const SchedulerOutput& plan, const std::string& id, int index = 0) {
  for (const ScheduledSequence& ss : plan.seqs) {
    if (ss.request_id == id && ss.index == index) return &ss;
  }
  return nullptr;
}

TEST(SchedulerTest, RejectsBadOptions) {
  SchedulerOptions o = Options(16);
  o.max_num_batched_tokens = 3;  // < max_num_seqs
  EXPECT_EQ(Scheduler::Create(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(SchedulerTest, RespectsTokenAndSequenceBudgets) {
  auto s = Make(Options(64));
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(s->AddRequest(Req("r" + std::to_string(i), 10, 3)).ok());
  StepResult r = Step(*s);
  EXPECT_EQ(r.plan.num_scheduled_tokens, 16);  // 10 + a 6-token chunk
  ASSERT_EQ(r.plan.seqs.size(), 2u);
  EXPECT_TRUE(r.plan.seqs[0].sample);
  EXPECT_FALSE(r.plan.seqs[1].sample);  // mid-prompt chunk: no logits
  EXPECT_EQ(r.plan.seqs[1].num_logits, 0);
  for (int i = 0; i < 20 && s->HasUnfinished(); ++i) {
    r = Step(*s);
    EXPECT_LE(r.plan.num_scheduled_tokens, 16);
    EXPECT_LE(r.plan.seqs.size(), 4u);
  }
  EXPECT_FALSE(s->HasUnfinished());
  EXPECT_EQ(s->kv_cache().num_free_blocks(), 64);
}

TEST(SchedulerTest, LongPromptNeverStallsDecodes) {
  SchedulerOptions o = Options(4096, 16);
  o.max_num_seqs = 8;
  o.max_num_batched_tokens = 512;
  auto s = Make(o);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE(s->AddRequest(Req("d" + std::to_string(i), 8, 200, 100 * i)).ok());
  Step(*s);  // the seven short prompts prefill together
  ASSERT_TRUE(s->AddRequest(Req("long", 30000, 4)).ok());
  int chunks = 0;
  while (true) {
    StepResult r = Step(*s);
    // Every decode runs every step while the long prompt is chunked in the rest.
    for (int i = 0; i < 7; ++i) {
      const ScheduledSequence* d = Find(r.plan, "d" + std::to_string(i));
      ASSERT_NE(d, nullptr) << "decode stalled at chunk " << chunks;
      EXPECT_EQ(d->token_ids.size(), 1u);
    }
    const ScheduledSequence* l = Find(r.plan, "long");
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->token_ids.size(), std::min<size_t>(512 - 7, 30000 - l->start_position));
    ++chunks;
    if (l->sample) break;
  }
  EXPECT_EQ(chunks, (30000 + 504) / 505);
}

TEST(SchedulerTest, PreemptsLatestArrivalAndRecomputes) {
  SchedulerOptions o = Options(6);  // 24 tokens
  o.max_num_batched_tokens = 32;
  auto s = Make(o);
  ASSERT_TRUE(s->AddRequest(Req("a", 8, 12, 100)).ok());
  ASSERT_TRUE(s->AddRequest(Req("b", 8, 12, 200)).ok());
  ASSERT_TRUE(s->AddRequest(Req("c", 7, 12, 300)).ok());
  StepResult r = Step(*s);
  ASSERT_EQ(r.plan.seqs.size(), 3u);  // 2 + 2 + 2 blocks
  // The next tokens need new blocks for a and b: c, the latest arrival, goes.
  std::vector<std::string> preempted;
  for (int i = 0; i < 3 && preempted.empty(); ++i) {
    r = Step(*s);
    for (SeqId id : r.plan.preempted) preempted.push_back(s->GetSequence(id)->request_id());
  }
  ASSERT_EQ(preempted, std::vector<std::string>{"c"});
  EXPECT_EQ(s->metrics().counters.preemptions, 1);
  EXPECT_EQ(s->num_waiting(), 1);
  // It returns later and recomputes its prompt and the token it had made
  // (from a cached prefix block where one survived), then finishes normally.
  bool resumed = false;
  std::vector<int32_t> c_out;
  for (int i = 0; i < 60 && s->HasUnfinished(); ++i) {
    r = Step(*s);
    if (const ScheduledSequence* c = Find(r.plan, "c"); c && !resumed) {
      resumed = true;
      EXPECT_EQ(c->start_position % 4, 0);
      EXPECT_EQ(static_cast<int64_t>(c->token_ids.size()) + c->start_position, 7 + 1);  // prompt + its first token
    }
    for (const SequenceOutput& so : r.outputs) {
      if (so.request_id == "c") c_out.insert(c_out.end(), so.new_token_ids.begin(), so.new_token_ids.end());
    }
  }
  EXPECT_TRUE(resumed);
  EXPECT_EQ(c_out.size(), 11u);  // 12 in all: nothing lost to the preemption
  EXPECT_FALSE(s->HasUnfinished());
  EXPECT_EQ(s->kv_cache().num_free_blocks(), 6);
}

TEST(SchedulerTest, PriorityOrdersAdmissionAndPreemption) {
  SchedulerOptions o = Options(6);
  o.policy = SchedulingPolicy::kPriority;
  o.max_num_seqs = 2;
  o.max_num_batched_tokens = 32;
  auto s = Make(o);
  Request low = Req("low", 4, 12, 100);
  low.params.priority = 5;
  Request mid = Req("mid", 4, 12, 200);
  mid.params.priority = 1;
  Request high = Req("high", 4, 12, 300);
  high.params.priority = 0;
  ASSERT_TRUE(s->AddRequest(low).ok());
  ASSERT_TRUE(s->AddRequest(mid).ok());
  ASSERT_TRUE(s->AddRequest(high).ok());
  StepResult r = Step(*s);
  EXPECT_NE(Find(r.plan, "high"), nullptr);
  EXPECT_NE(Find(r.plan, "mid"), nullptr);
  EXPECT_EQ(Find(r.plan, "low"), nullptr);

  // With low running beside high and blocks short, low is the victim even
  // though it arrived first.
  auto s2 = Make(o);
  ASSERT_TRUE(s2->AddRequest(low).ok());
  ASSERT_TRUE(s2->AddRequest(high).ok());
  std::vector<SeqId> preempted;
  for (int i = 0; i < 12 && preempted.empty(); ++i) {
    r = Step(*s2);
    preempted = r.plan.preempted;
  }
  ASSERT_EQ(preempted.size(), 1u);
  EXPECT_EQ(s2->GetSequence(preempted[0])->request_id(), "low");
}

TEST(SchedulerTest, RejectsNeverFittingRequestsAndFullQueue) {
  SchedulerOptions o = Options(8);  // 32 tokens
  o.max_waiting_seqs = 2;
  auto s = Make(o);
  Status st = s->AddRequest(Req("big", 30, 8));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("KV cache holds only 8 blocks"), std::string::npos) << st.message();
  ASSERT_TRUE(s->AddRequest(Req("a", 4, 4)).ok());
  ASSERT_TRUE(s->AddRequest(Req("b", 4, 4)).ok());
  st = s->AddRequest(Req("c", 4, 4));
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s->AddRequest(Req("a", 4, 4)).code(), StatusCode::kInvalidArgument);  // duplicate id
  Request ctx = Req("ctx", 4, 4);
  ctx.params.max_tokens = 1 << 16;  // the front end refuses it (input_processor_test.cc); here it is a bug
  EXPECT_EQ(s->AddRequest(ctx).code(), StatusCode::kInternal);
  const SchedulerMetrics m = s->metrics();
  EXPECT_EQ(m.counters.requests_rejected, 3);
  EXPECT_EQ(m.counters.requests_queue_full, 1);
  EXPECT_EQ(m.gauges.num_waiting, 2);
}

// Requests are validated in the front end (ValidateRequest); the scheduler only
// checks what it relies on, and a broken invariant is INTERNAL.
TEST(SchedulerTest, BrokenInvariantsAreInternal) {
  auto s = Make(Options(64));
  Request export_two = Req("x", 4, 4);
  export_two.export_kv = true;
  export_two.params.n = 2;
  EXPECT_EQ(s->AddRequest(export_two).code(), StatusCode::kInternal);
  EXPECT_EQ(s->AddRequest(Req("", 4, 4)).code(), StatusCode::kInternal);
  EXPECT_EQ(s->AddRequest(Req("e", 0, 4)).code(), StatusCode::kInternal);
  EXPECT_TRUE(s->AddRequest(Req("ok", 4, 4)).ok());
}

TEST(SchedulerTest, AbortFreesBlocksNowOrAfterTheStep) {
  auto s = Make(Options(16));
  ASSERT_TRUE(s->AddRequest(Req("a", 10, 50)).ok());
  ASSERT_TRUE(s->AddRequest(Req("b", 3, 50)).ok());
  Step(*s);
  EXPECT_LT(s->kv_cache().num_free_blocks(), 16);
  ASSERT_TRUE(s->AbortRequest("a").ok());
  EXPECT_EQ(s->AbortRequest("a").code(), StatusCode::kNotFound);
  // Mid-step abort: the plan's blocks stay valid until the step is applied.
  SchedulerOutput plan = s->Schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.finished.size(), 1u);  // a, for the engine to drop
  ASSERT_TRUE(s->AbortRequest("b").ok());
  EXPECT_TRUE(s->HasUnfinished());
  auto out = s->UpdateFromOutput(std::vector<SampledTokens>{{plan.seqs[0].seq_id, {7}}});
  ASSERT_TRUE(out.ok());
  EXPECT_FALSE(s->HasUnfinished());
  EXPECT_EQ(s->kv_cache().num_free_blocks(), 16);
  auto stats = s->TakeFinishedStats();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].reason, FinishReason::kAbort);
  EXPECT_EQ(s->metrics().counters.seqs_aborted, 2);
}

TEST(SchedulerTest, StopConditions) {
  auto s = Make(Options(64));
  Request eos = Req("eos", 3, 10);
  Request ignore = Req("ignore", 3, 3);
  ignore.params.ignore_eos = true;
  Request min = Req("min", 3, 10);
  min.params.min_tokens = 2;
  Request stop_id = Req("stop_id", 3, 10);
  stop_id.params.stop_token_ids = {9};
  for (auto* r : {&eos, &ignore, &min, &stop_id}) ASSERT_TRUE(s->AddRequest(*r).ok());
  std::map<std::string, std::vector<int32_t>> out;
  std::map<std::string, FinishReason> why;
  for (int i = 0; i < 10 && s->HasUnfinished(); ++i) {
    StepResult r = Step(*s, [](const ScheduledSequence& ss) { return ss.request_id == "stop_id" ? 9 : kEos; });
    for (const SequenceOutput& o : r.outputs) {
      out[o.request_id].insert(out[o.request_id].end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finish_reason != FinishReason::kNone) why[o.request_id] = o.finish_reason;
    }
  }
  EXPECT_EQ(out["eos"].size(), 1u);
  EXPECT_EQ(why["eos"], FinishReason::kStop);
  EXPECT_EQ(out["ignore"].size(), 3u);
  EXPECT_EQ(why["ignore"], FinishReason::kLength);
  EXPECT_EQ(out["min"].size(), 2u);
  EXPECT_EQ(why["min"], FinishReason::kStop);
  EXPECT_EQ(out["stop_id"].size(), 1u);
  EXPECT_EQ(why["stop_id"], FinishReason::kStop);

  // A stop string matched by the front end ends one choice from outside.
  ASSERT_TRUE(s->AddRequest(Req("text", 3, 10)).ok());
  Step(*s);
  ASSERT_TRUE(s->FinishSequence("text", 0, FinishReason::kStop).ok());
  EXPECT_FALSE(s->HasUnfinished());
  EXPECT_EQ(s->FinishSequence("text", 0, FinishReason::kStop).code(), StatusCode::kNotFound);
}

TEST(SchedulerTest, ForksShareThePromptWithCopyOnWrite) {
  auto s = Make(Options(32));
  Request r = Req("n3", 10, 3);  // blocks [0..3] [4..7] [8, 9]
  r.params.n = 3;
  ASSERT_TRUE(s->AddRequest(r).ok());
  StepResult st = Step(*s);
  ASSERT_EQ(st.plan.seqs.size(), 1u);
  EXPECT_EQ(st.plan.seqs[0].token_ids.size(), 9u);  // stops one short of the prompt's end
  EXPECT_FALSE(st.plan.seqs[0].sample);
  st = Step(*s);
  ASSERT_EQ(st.plan.seqs.size(), 3u);  // all three compute the last prompt token
  EXPECT_EQ(st.plan.copies.size(), 2u);  // two of them copy the shared partial block
  for (const ScheduledSequence& ss : st.plan.seqs) {
    EXPECT_EQ(ss.start_position, 9);
    EXPECT_TRUE(ss.sample);
    EXPECT_EQ(ss.block_ids[0], st.plan.seqs[0].block_ids[0]);  // full blocks shared
    EXPECT_EQ(ss.block_ids[1], st.plan.seqs[0].block_ids[1]);
  }
  EXPECT_NE(st.plan.seqs[0].block_ids[2], st.plan.seqs[1].block_ids[2]);
  EXPECT_NE(st.plan.seqs[1].block_ids[2], st.plan.seqs[2].block_ids[2]);
  EXPECT_EQ(st.outputs.size(), 3u);
  while (s->HasUnfinished()) Step(*s);
  EXPECT_EQ(s->TakeFinishedStats().size(), 3u);
  EXPECT_EQ(s->kv_cache().num_free_blocks(), 32);
}

TEST(SchedulerTest, SpeculativeDraftsAreVerifiedAndRolledBack) {
  SchedulerOptions o = Options(32);
  o.num_lookahead_tokens = 3;
  auto s = Make(o);
  ASSERT_TRUE(s->AddRequest(Req("a", 5, 20)).ok());
  StepResult r = Step(*s);
  const SeqId id = r.plan.seqs[0].seq_id;
  EXPECT_EQ(r.plan.seqs[0].block_ids.size(), 2u);  // 5 tokens + lookahead 3 = 8 slots
  ASSERT_TRUE(s->SetDraftTokens(id, {11, 12, 13}).ok());
  EXPECT_FALSE(s->SetDraftTokens(id, {1, 2, 3, 4}).ok());
  SchedulerOutput plan = s->Schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].token_ids, (std::vector<int32_t>{7, 11, 12, 13}));
  EXPECT_EQ(plan.seqs[0].num_draft_tokens, 3);
  EXPECT_EQ(plan.seqs[0].num_logits, 4);
  EXPECT_EQ(plan.seqs[0].block_ids.size(), 3u);  // positions 5..8
  // One draft accepted, then the correction token.
  auto out = s->UpdateFromOutput(std::vector<SampledTokens>{{id, {11, 40}}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const Sequence* seq = s->GetSequence(id);
  EXPECT_EQ(seq->num_tokens(), 8);           // 5 prompt + 7, 11, 40
  EXPECT_EQ(seq->num_computed_tokens, 7);   // 40's KV is computed next step
  plan = s->Schedule();
  EXPECT_EQ(plan.seqs[0].start_position, 7);
  EXPECT_EQ(plan.seqs[0].token_ids, (std::vector<int32_t>{40}));
  // Too many tokens back is a mismatch, reported without changing state.
  EXPECT_EQ(s->UpdateFromOutput(std::vector<SampledTokens>{{id, {1, 2}}}).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_TRUE(s->UpdateFromOutput(std::vector<SampledTokens>{{id, {1}}}).ok());
}

// Drafts count against the step budget but leave half of it to pending
// prefills; ReserveDraftSlots extends the block table for them first.
TEST(SchedulerTest, DraftsShareTheBudgetWithPrefills) {
  SchedulerOptions o = Options(64);
  o.num_lookahead_tokens = 8;  // 4 seqs x (1 + 8) > 16: drafts are optional tokens
  o.max_num_batched_tokens = 12;
  auto s = Make(o);
  ASSERT_TRUE(s->AddRequest(Req("a", 5, 30)).ok());
  const SeqId a = Step(*s).plan.seqs[0].seq_id;
  EXPECT_EQ(s->ReserveDraftSlots(a, 8), 8);
  EXPECT_EQ(s->kv_cache().blocks(a).size(), 4u);  // positions < 6 + 8, blocks of 4
  ASSERT_TRUE(s->SetDraftTokens(a, {21, 22, 23, 24, 25, 26, 27, 28}).ok());
  ASSERT_TRUE(s->AddRequest(Req("b", 40, 3)).ok());
  SchedulerOutput plan = s->Schedule();
  const ScheduledSequence* pa = Find(plan, "a");
  const ScheduledSequence* pb = Find(plan, "b");
  ASSERT_TRUE(pa && pb);
  EXPECT_EQ(pa->num_draft_tokens, 6);  // half of 12, minus nothing: b still gets 12 - 7
  EXPECT_EQ(pa->token_ids.size(), 7u);
  EXPECT_EQ(pb->token_ids.size(), 5u);
  auto out = s->UpdateFromOutput(std::vector<SampledTokens>{{a, {21, 22, 23, 24, 25, 26, 99}}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(s->GetSequence(a)->num_tokens(), 13);
  EXPECT_EQ(s->GetSequence(a)->num_computed_tokens, 12);
  // Nothing pending: drafts may use all but one token per running sequence.
  auto t = Make(o);
  ASSERT_TRUE(t->AddRequest(Req("c", 5, 30)).ok());
  const SeqId c = Step(*t).plan.seqs[0].seq_id;
  ASSERT_EQ(t->ReserveDraftSlots(c, 8), 8);
  ASSERT_TRUE(t->SetDraftTokens(c, {1, 2, 3, 4, 5, 6, 7, 8}).ok());
  EXPECT_EQ(t->Schedule().seqs[0].num_draft_tokens, 8);
}

// A block that holds unverified draft KV is never registered in the prefix
// cache: a later prompt equal to prompt + drafts hits only verified blocks.
TEST(SchedulerTest, UnverifiedDraftsNeverReachThePrefixCache) {
  SchedulerOptions o = Options(64);
  o.num_lookahead_tokens = 5;
  auto s = Make(o);
  Request a = Req("a", 3, 20);
  ASSERT_TRUE(s->AddRequest(a).ok());
  const SeqId id = Step(*s).plan.seqs[0].seq_id;  // samples 7 at position 3
  ASSERT_EQ(s->ReserveDraftSlots(id, 5), 5);
  ASSERT_TRUE(s->SetDraftTokens(id, {31, 32, 33, 34, 35}).ok());
  SchedulerOutput plan = s->Schedule();  // computes positions 3..8 (blocks 0-2 of 4)
  ASSERT_EQ(plan.seqs[0].num_draft_tokens, 5);
  ASSERT_TRUE(s->UpdateFromOutput(std::vector<SampledTokens>{{id, {40}}}).ok());  // every draft rejected
  EXPECT_EQ(s->GetSequence(id)->num_computed_tokens, 4);
  Request b = Req("b", 0, 2);
  b.prompt_token_ids = a.prompt_token_ids;
  for (int32_t t : {7, 31, 32, 33, 34, 35, 36}) b.prompt_token_ids.push_back(t);
  ASSERT_TRUE(s->AddRequest(b).ok());
  const int64_t hits = s->kv_cache().stats().prefix_hits;
  Step(*s, [](const ScheduledSequence&) { return 50; });
  EXPECT_EQ(s->kv_cache().stats().prefix_hits - hits, 4);  // block 0 only (3 prompt tokens + the verified 7)
}

TEST(SchedulerTest, MetricsHooks) {
  SchedulerOptions o = Options(64);
  int64_t now = 1'000'000'000;
  o.clock = [&] { return now; };
  auto s = Make(o);
  ASSERT_TRUE(s->AddRequest(Req("a", 9, 2)).ok());
  now += 250'000'000;  // waits 0.25 s before its first step
  Step(*s);
  SchedulerMetrics m = s->metrics();
  EXPECT_EQ(m.gauges.num_running, 1);
  EXPECT_GT(m.gauges.kv_usage, 0.0);
  while (s->HasUnfinished()) Step(*s);
  ASSERT_TRUE(s->AddRequest(Req("b", 9, 2)).ok());  // same prompt: 2 cached blocks
  while (s->HasUnfinished()) Step(*s);
  m = s->metrics();
  EXPECT_EQ(m.counters.prompt_tokens, 9 + 1);
  EXPECT_EQ(m.counters.generation_tokens, 4);
  EXPECT_EQ(m.counters.prefix_cache_queries, 18);
  EXPECT_EQ(m.counters.prefix_cache_hits, 8);
  EXPECT_EQ(m.counters.seqs_finished_length, 2);
  auto stats = s->TakeFinishedStats();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_DOUBLE_EQ(stats[0].queue_time_s, 0.25);
  EXPECT_EQ(stats[1].num_cached_tokens, 8);
  EXPECT_EQ(stats[1].num_output_tokens, 2);
  EXPECT_TRUE(s->TakeFinishedStats().empty());
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Time-bounded steps: the engine loop's budget caps prefill chunks, but every
// running decode still gets its token and a prefill still advances.
TEST(SchedulerStepBudgetTest, CapsPrefillButNeverStarvesDecodes) {
  SchedulerOptions o = Options(/*blocks=*/256);
  o.max_num_batched_tokens = 512;
  o.max_num_seqs = 8;
  auto s = Make(o);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->AddRequest(Req("d" + std::to_string(i), 4, 100, i * 50)).ok());
  Step(*s);  // three short prompts prefill together
  ASSERT_TRUE(s->AddRequest(Req("long", 300, 4, 500)).ok());
  s->SetStepTokenBudget(1);  // far below what the running decodes need
  StepResult r = Step(*s);
  int64_t prefill = 0, decodes = 0;
  for (const ScheduledSequence& ss : r.plan.seqs) {
    if (ss.request_id == "long") {
      prefill += static_cast<int64_t>(ss.token_ids.size());
    } else {
      ++decodes;
    }
  }
  EXPECT_EQ(decodes, 3);  // all decodes, whatever the budget
  EXPECT_EQ(prefill, Scheduler::kMinStepPrefillTokens);
  s->SetStepTokenBudget(40);
  r = Step(*s);
  const ScheduledSequence* ss = Find(r.plan, "long");
  ASSERT_NE(ss, nullptr);
  EXPECT_EQ(static_cast<int64_t>(ss->token_ids.size()), 40 - 3);
  s->SetStepTokenBudget(0);  // no cap: the rest of the prompt in one step
  r = Step(*s);
  ss = Find(r.plan, "long");
  ASSERT_NE(ss, nullptr);
  EXPECT_EQ(static_cast<int64_t>(ss->token_ids.size()), 300 - 16 - 37);
}

// Prompt-logprob rows have their own per-step cap (each is a log-softmax over
// the vocabulary): a prompt_logprobs prompt goes in chunks of at most that many
// tokens (never fewer than kMinStepPrefillTokens), with a logits row each, while
// a plain prompt beside it is not held to it.
TEST(SchedulerStepBudgetTest, CapsPromptLogprobRows) {
  SchedulerOptions o = Options(/*blocks=*/256);
  o.max_num_batched_tokens = 512;
  auto s = Make(o);
  Request lp = Req("lp", 200, 2);
  lp.params.prompt_logprobs = 3;
  ASSERT_TRUE(s->AddRequest(lp).ok());
  ASSERT_TRUE(s->AddRequest(Req("plain", 150, 2, 400)).ok());
  s->SetStepPromptLogprobRows(40);
  int64_t done = 0;
  for (int step = 0; done < 200; ++step) {
    ASSERT_LT(step, 10);
    StepResult r = Step(*s);
    const ScheduledSequence* ss = Find(r.plan, "lp");
    ASSERT_NE(ss, nullptr);
    const int64_t n = static_cast<int64_t>(ss->token_ids.size());
    EXPECT_LE(n, 40);
    EXPECT_EQ(ss->num_logits, n);
    if (step == 0) {
      const ScheduledSequence* plain = Find(r.plan, "plain");
      ASSERT_NE(plain, nullptr);
      EXPECT_EQ(static_cast<int64_t>(plain->token_ids.size()), 150);
    }
    done += n;
  }
  EXPECT_EQ(done, 200);
  s->SetStepPromptLogprobRows(1);  // below the floor: still kMinStepPrefillTokens
  Request lp2 = Req("lp2", 100, 2, 700);
  lp2.params.prompt_logprobs = 0;
  ASSERT_TRUE(s->AddRequest(lp2).ok());
  StepResult r = Step(*s);
  const ScheduledSequence* ss = Find(r.plan, "lp2");
  ASSERT_NE(ss, nullptr);
  EXPECT_EQ(static_cast<int64_t>(ss->token_ids.size()), Scheduler::kMinStepPrefillTokens);
}

}  // namespace
}  // namespace tessera
