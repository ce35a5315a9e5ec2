// Property test: the scheduler driven by a fake executor over >= 1,000 random
// requests (prompt/output lengths, shared prefixes, n, priorities, aborts,
// bursts past the queue limit, requests that can never fit) under a tight
// KV budget. The fake executor's token for (request, choice, output position)
// is a fixed pseudo-random function, so every choice's exact output is known
// in advance whatever the batching, chunking, preemption or caching.
//
// Checked every step: the plan respects the token/sequence budgets; the
// ForwardBatch built from it satisfies engine CheckBatch's invariants; a shadow
// KV store (token id per slot, copy ops applied) shows that every position a
// sequence attends to holds that sequence's token — so prefix hits, forks,
// copy-on-write and recompute after preemption never read wrong KV.
// Checked at the end: every choice ended exactly once with exactly the expected
// tokens (or was aborted / its request rejected with the expected status); the
// block pool is full again with no references left.
//
// Wait bound. Let the head be the unfinished choice with the smallest policy
// key (priority under kPriority, then arrival, then choice index). The
// scheduler guarantees, and this test asserts each step:
//   (a) a running head is scheduled every step (it is never a preemption
//       victim: victims are the largest key, and it fits alone because
//       requests that cannot were rejected; decodes use at most
//       (max_num_seqs - 1) tokens of the budget, so its chunk gets >= 1);
//   (b) a step that leaves the head waiting admits no other sequence (no
//       bypass; admitting the head lets the ones behind it follow).
// Under FCFS, (a)+(b) and arrival order give the stated bound: once a choice
// is the head it ends within P + M steps (P prompt tokens, M = max tokens),
// since it is admitted at once (everything ahead of it has ended) and
// computes >= 1 token per step. So a choice waits at most the sum of P + M of
// the choices ahead of it. Under kPriority the head may first wait for
// lower-priority running sequences to drain (admission does not preempt),
// which (b) bounds by their remaining work.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "runtime/plan_to_batch.h"
#include "scheduler/scheduler.h"
#include "tests/unit/scheduler/batch_check.h"

namespace tessera {
namespace {

constexpr int32_t kVocab = 500;
constexpr int32_t kEos = 0;
constexpr int32_t kBlockSize = 16;
constexpr int32_t kNumBlocks = 64;  // 1,024 tokens: a few long requests fill it

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int32_t FakeToken(uint64_t req_key, int32_t index, int64_t out_pos) {
  const uint64_t h = Mix(req_key * 1000003ULL + static_cast<uint64_t>(index) * 7919ULL + out_pos);
  if (h % 23 == 0) return kEos;
  return 1 + static_cast<int32_t>(h % (kVocab - 1));
}

struct Choice {
  std::string req;
  int32_t index = 0;
  uint64_t key = 0;
  std::vector<int32_t> prompt;
  std::vector<int32_t> out;
  int64_t max_tokens = 0;
  int32_t min_tokens = 0;
  bool ignore_eos = false;
  int32_t priority = 0;
  int64_t arrival = 0;
  bool aborted = false;
  int ended = 0;
  FinishReason reason = FinishReason::kNone;
  int64_t head_since = -1;

  int32_t TokenAt(int64_t pos) const {
    return pos < static_cast<int64_t>(prompt.size()) ? prompt[pos] : out[pos - prompt.size()];
  }
  int64_t num_tokens() const { return static_cast<int64_t>(prompt.size() + out.size()); }
  // The exact output the fake executor must produce.
  std::pair<std::vector<int32_t>, FinishReason> Expected() const {
    std::vector<int32_t> o;
    while (true) {
      const int32_t t = FakeToken(key, index, static_cast<int64_t>(o.size()));
      o.push_back(t);
      const int64_t n = static_cast<int64_t>(o.size());
      if (n >= min_tokens && t == kEos && !ignore_eos) return {o, FinishReason::kStop};
      if (n >= max_tokens) return {o, FinishReason::kLength};
    }
  }
};

struct Case {
  SchedulingPolicy policy;
  bool caching;
  uint32_t seed;
};

class SchedulerPropertyTest : public ::testing::TestWithParam<Case> {};

TEST_P(SchedulerPropertyTest, RandomWorkload) {
  const Case c = GetParam();
  SchedulerOptions o;
  o.max_num_seqs = 16;
  o.max_num_batched_tokens = 96;
  o.max_waiting_seqs = 40;
  o.policy = c.policy;
  o.kv = {kNumBlocks, kBlockSize, c.caching};
  o.limits.max_model_len = 2048;
  o.limits.vocab_size = kVocab;
  o.limits.max_n = 4;
  o.eos_token_ids = {kEos};
  auto sched_or = Scheduler::Create(o);
  ASSERT_TRUE(sched_or.ok()) << sched_or.status().ToString();
  Scheduler& s = **sched_or;

  std::mt19937 rng(c.seed);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p(uni(48, 130));
    for (auto& t : p) t = uni(1, kVocab - 1);
    prefixes.push_back(p);
  }

  constexpr int kRequests = 1500;
  std::map<std::pair<std::string, int32_t>, Choice> choices;
  std::map<std::tuple<int32_t, int64_t, int32_t>, Choice*> unfinished;  // policy key -> choice
  std::set<std::string> live_requests;
  int added = 0, submitted = 0, never_fit = 0, queue_full = 0, aborts = 0;
  int64_t arrival = 0;
  std::vector<int64_t> slot_token(static_cast<size_t>(kNumBlocks) * kBlockSize, -1);
  std::set<SeqId> running;  // scheduled and not since preempted or ended
  std::map<SeqId, Choice*> by_seq;

  auto submit = [&] {
    Request r;
    r.id = "r" + std::to_string(submitted);
    const uint64_t key = Mix(c.seed * 7777ULL + submitted++);
    const int kind = uni(0, 99);
    if (kind < 40) {
      r.prompt_token_ids = prefixes[uni(0, 3)];
      for (int i = uni(0, 40); i > 0; --i) r.prompt_token_ids.push_back(uni(1, kVocab - 1));
    } else {
      r.prompt_token_ids.resize(kind < 50 ? uni(300, 700) : kind < 52 ? uni(1000, 1100) : uni(1, 160));
      for (auto& t : r.prompt_token_ids) t = uni(1, kVocab - 1);
    }
    r.params.max_tokens = uni(1, 48);
    if (uni(0, 9) == 0) r.params.min_tokens = uni(0, *r.params.max_tokens);
    r.params.ignore_eos = uni(0, 9) == 0;
    r.params.n = uni(0, 9) < 8 ? 1 : uni(2, 4);
    r.params.priority = uni(0, 3);
    const int64_t need = (static_cast<int64_t>(r.prompt_token_ids.size()) + *r.params.max_tokens + kBlockSize - 1) /
                         kBlockSize;
    const int64_t waiting_before = s.num_waiting();
    const Request copy = r;
    Status st = s.AddRequest(std::move(r));
    if (need > kNumBlocks) {
      ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
      ASSERT_NE(st.message().find("KV blocks"), std::string::npos);
      ++never_fit;
      return;
    }
    if (waiting_before >= o.max_waiting_seqs) {
      ASSERT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
      ++queue_full;
      return;
    }
    ASSERT_TRUE(st.ok()) << st.ToString();
    ++added;
    live_requests.insert(copy.id);
    const int64_t arr = arrival++;
    for (int32_t i = 0; i < copy.params.n; ++i) {
      Choice ch;
      ch.req = copy.id;
      ch.index = i;
      ch.key = key;
      ch.prompt = copy.prompt_token_ids;
      ch.max_tokens = *copy.params.max_tokens;
      ch.min_tokens = copy.params.min_tokens;
      ch.ignore_eos = copy.params.ignore_eos;
      ch.priority = copy.params.priority;
      ch.arrival = arr;
      Choice& ref = choices[{ch.req, i}] = ch;
      unfinished[{c.policy == SchedulingPolicy::kPriority ? ref.priority : 0, arr, i}] = &ref;
    }
  };
  auto abort_random = [&] {
    if (live_requests.empty()) return;
    auto it = live_requests.begin();
    std::advance(it, uni(0, static_cast<int>(live_requests.size()) - 1));
    ASSERT_TRUE(s.AbortRequest(*it).ok());
    for (auto& [k, ch] : choices) {
      if (k.first == *it) ch.aborted = true;
    }
    live_requests.erase(it);
    ++aborts;
  };

  auto drain = [&](int64_t step) {
    for (const FinishedSequenceStats& f : s.TakeFinishedStats()) {
      Choice& ch = choices.at({f.request_id, f.index});
      ++ch.ended;
      ch.reason = f.reason;
      ASSERT_EQ(f.num_output_tokens, static_cast<int64_t>(ch.out.size()));
      unfinished.erase({c.policy == SchedulingPolicy::kPriority ? ch.priority : 0, ch.arrival, ch.index});
      if (c.policy == SchedulingPolicy::kFcfs && f.reason != FinishReason::kAbort && ch.head_since >= 0) {
        // Stated bound: ends within P + M steps of becoming the head.
        ASSERT_LE(step - ch.head_since + 1, static_cast<int64_t>(ch.prompt.size()) + ch.max_tokens)
            << ch.req << " choice " << ch.index;
      }
      bool all_ended = true;
      for (int32_t i = 0;; ++i) {
        auto it = choices.find({ch.req, i});
        if (it == choices.end()) break;
        all_ended &= it->second.ended > 0;
      }
      if (all_ended) live_requests.erase(ch.req);
    }
  };

  int64_t step = 0;
  for (; step < 200000 && (submitted < kRequests || s.HasUnfinished()); ++step) {
    if (submitted < kRequests) {
      const int arrivals = uni(0, 399) == 0 ? uni(40, 60) : uni(0, 4) == 0;
      for (int i = 0; i < arrivals && submitted < kRequests; ++i) submit();
      if (HasFatalFailure()) return;
    }
    if (uni(0, 39) == 0) abort_random();

    // Head at the start of the step.
    Choice* head = nullptr;  // aborted choices end this step whatever their key
    for (auto& [k, ch] : unfinished) {
      if (!ch->aborted) {
        head = ch;
        break;
      }
    }
    if (head && head->head_since < 0) head->head_since = step;

    SchedulerOutput plan = s.Schedule();
    if (s.HasUnfinished()) {
      ASSERT_FALSE(plan.empty()) << "idle step with work pending, step " << step;
    }
    if (plan.empty()) {
      drain(step);
      continue;
    }
    ASSERT_LE(plan.num_scheduled_tokens, o.max_num_batched_tokens);
    ASSERT_LE(static_cast<int64_t>(plan.seqs.size()), o.max_num_seqs);
    for (SeqId p : plan.preempted) running.erase(p);

    auto batch = MakeForwardBatch(plan, kBlockSize);
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    ASSERT_TRUE(BatchIsConsistent(*batch, kNumBlocks, kBlockSize));

    // Shadow KV: copies first, then this step's writes, then every read.
    for (const CopyOp& cp : plan.copies) {
      std::copy_n(slot_token.begin() + cp.src * kBlockSize, kBlockSize, slot_token.begin() + cp.dst * kBlockSize);
    }
    std::set<int64_t> written;
    bool head_scheduled = false;
    for (const ScheduledSequence& ss : plan.seqs) {
      Choice& ch = choices.at({ss.request_id, ss.index});
      by_seq[ss.seq_id] = &ch;
      ASSERT_EQ(ch.ended, 0);
      ASSERT_EQ(ss.num_draft_tokens, 0);
      const int64_t end = ss.start_position + static_cast<int64_t>(ss.token_ids.size());
      ASSERT_LE(end, ch.num_tokens());
      ASSERT_EQ(ss.sample, end == ch.num_tokens());
      for (size_t i = 0; i < ss.token_ids.size(); ++i) {
        const int64_t pos = ss.start_position + static_cast<int64_t>(i);
        ASSERT_EQ(ss.token_ids[i], ch.TokenAt(pos));
        const int64_t slot = static_cast<int64_t>(ss.block_ids[pos / kBlockSize]) * kBlockSize + pos % kBlockSize;
        ASSERT_TRUE(written.insert(slot).second) << "slot written twice in one step";
        slot_token[slot] = ss.token_ids[i];
      }
      if (&ch == head) head_scheduled = true;
    }
    for (const ScheduledSequence& ss : plan.seqs) {
      const Choice& ch = choices.at({ss.request_id, ss.index});
      for (int64_t q = 0; q < ss.start_position; ++q) {
        const int64_t slot = static_cast<int64_t>(ss.block_ids[q / kBlockSize]) * kBlockSize + q % kBlockSize;
        ASSERT_EQ(slot_token[slot], ch.TokenAt(q)) << "stale KV at position " << q << " of " << ss.request_id;
      }
    }
    // Wait-bound invariants (a) and (b).
    if (head) {
      bool head_was_running = false;
      for (SeqId id : running) head_was_running |= by_seq.count(id) && by_seq[id] == head;
      if (head_was_running) {
        ASSERT_TRUE(head_scheduled) << "running head not scheduled at step " << step;
      } else if (!head_scheduled) {
        for (const ScheduledSequence& ss : plan.seqs) {
          if (!running.count(ss.seq_id)) {
            ASSERT_EQ(by_seq[ss.seq_id], head) << "a sequence bypassed the waiting head at step " << step << ": "
                << by_seq[ss.seq_id]->req << "#" << by_seq[ss.seq_id]->index << " (prio " << by_seq[ss.seq_id]->priority
                << ") before " << head->req << "#" << head->index << " (prio " << head->priority << ", " << head->prompt.size()
                << " prompt, out " << head->out.size() << ") start " << ss.start_position << " preempted " << plan.preempted.size()
                << " running " << s.num_running() << " waiting " << s.num_waiting();
          }
        }
      }
    }
    for (const ScheduledSequence& ss : plan.seqs) running.insert(ss.seq_id);

    // Fake executor.
    std::vector<SampledTokens> sampled;
    for (const ScheduledSequence& ss : plan.seqs) {
      if (!ss.sample) continue;
      const Choice& ch = *by_seq[ss.seq_id];
      sampled.push_back({ss.seq_id, {FakeToken(ch.key, ch.index, static_cast<int64_t>(ch.out.size()))}});
    }
    if (uni(0, 59) == 0) abort_random();  // lands mid-step: deferred
    auto outs = s.UpdateFromOutput(sampled);
    ASSERT_TRUE(outs.ok()) << outs.status().ToString();
    for (const SequenceOutput& so : *outs) {
      Choice& ch = choices.at({so.request_id, so.index});
      ch.out.insert(ch.out.end(), so.new_token_ids.begin(), so.new_token_ids.end());
    }
    drain(step);
    for (SeqId id : plan.finished) running.erase(id);
    for (auto it = running.begin(); it != running.end();) {
      it = s.GetSequence(*it) ? std::next(it) : running.erase(it);
    }
  }
  ASSERT_FALSE(s.HasUnfinished()) << "did not drain in " << step << " steps";

  // Every choice ended exactly once, with exactly the expected output.
  int64_t choices_done = 0;
  for (const auto& [k, ch] : choices) {
    ASSERT_EQ(ch.ended, 1) << k.first << " choice " << k.second;
    if (ch.reason == FinishReason::kAbort) {
      ASSERT_TRUE(ch.aborted) << k.first;
      continue;
    }
    const auto [want, why] = ch.Expected();
    ASSERT_EQ(ch.out, want) << k.first << " choice " << k.second;
    ASSERT_EQ(ch.reason, why);
    ++choices_done;
  }
  // Pool back to full: no leaked blocks or references.
  const KvCacheManager& kv = s.kv_cache();
  EXPECT_EQ(kv.num_free_blocks(), kNumBlocks);
  for (BlockId b = 0; b < kNumBlocks; ++b) EXPECT_EQ(kv.pool().ref_count(b), 0);
  EXPECT_EQ(s.num_running() + s.num_waiting(), 0);

  const SchedulerMetrics m = s.metrics();
  EXPECT_EQ(submitted, kRequests);
  EXPECT_GT(never_fit, 0);
  EXPECT_GT(queue_full, 0);
  EXPECT_GT(aborts, 0);
  EXPECT_GT(m.counters.preemptions, 0);  // the budget is tight
  EXPECT_EQ(m.counters.requests_rejected, never_fit);
  EXPECT_EQ(m.counters.requests_queue_full, queue_full);
  if (c.caching) {
    EXPECT_GT(m.counters.prefix_cache_hits, 0);
    EXPECT_GT(m.prefix_cache_hit_rate(), 0.05);
  } else {
    EXPECT_EQ(m.counters.prefix_cache_queries, 0);
  }
  EXPECT_GT(m.counters.cow_copies, 0);  // n > 1 forks share a partial block
  std::cout << "steps=" << step << " added=" << added << " choices_done=" << choices_done
            << " never_fit=" << never_fit << " queue_full=" << queue_full << " aborts=" << aborts
            << " preemptions=" << m.counters.preemptions << " hit_rate=" << m.prefix_cache_hit_rate()
            << " cow=" << m.counters.cow_copies << "\n";
}

INSTANTIATE_TEST_SUITE_P(Policies, SchedulerPropertyTest,
                         ::testing::Values(Case{SchedulingPolicy::kFcfs, true, 1},
                                           Case{SchedulingPolicy::kPriority, true, 2},
                                           Case{SchedulingPolicy::kFcfs, false, 3}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.policy == SchedulingPolicy::kFcfs ? "Fcfs" : "Priority") +
                                  (i.param.caching ? "Cached" : "Uncached");
                         });

}  // namespace
}  // namespace tessera
