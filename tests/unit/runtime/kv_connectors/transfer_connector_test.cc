// Disaggregation through the scheduler's KV connector seam, with the
// TransferConnector's scheduler half (no transport): an exporting request
// keeps its prompt's full blocks after it ends until released; a request with
// a remote KV source gets fresh blocks for exactly the full blocks its prefix
// cache lacks, and after a successful load is admitted with them as a prefix
// hit (after a failed one it computes everything). Plain ids only, no tensors.
#include <algorithm>

#include <gtest/gtest.h>

#include "runtime/kv_connectors/transfer_connector.h"
#include "scheduler/scheduler.h"
#include "tests/unit/scheduler/scheduler_steps.h"

namespace tessera {
namespace {

SchedulerOptions Options(int32_t blocks, TransferConnector* c) {
  SchedulerOptions o;
  o.kv_connectors = {c};
  o.max_num_seqs = 4;
  o.max_num_batched_tokens = 64;
  o.kv = {blocks, 4, true};
  o.limits.max_model_len = 1 << 12;
  o.limits.vocab_size = 1000;
  return o;
}

Request Req(const std::string& id, int prompt_len, int max_tokens, int first = 10) {
  return testing::ConsecutiveRequest(id, prompt_len, max_tokens, first);
}
using testing::RunAll;

TEST(SchedulerKvTransferTest, ExportKeepsPromptBlocksUntilReleased) {
  TransferConnector c;
  auto s = std::move(Scheduler::Create(Options(16, &c))).value();
  Request r = Req("p", 10, 1);  // 2 full blocks of 4 + 2 tokens
  r.export_kv = true;
  ASSERT_TRUE(s->AddRequest(std::move(r)).ok());
  RunAll(*s);
  std::vector<TransferConnector::Export> ex = c.TakePending().exports;
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0].request_id, "p");
  EXPECT_EQ(ex[0].blocks.size(), 2u);
  EXPECT_EQ(ex[0].hashes.size(), 2u);
  EXPECT_EQ(s->num_kv_holds(), 1);
  EXPECT_GT(s->kv_cache().Usage(), 0.0);  // pinned
  s->ReleaseKvHold("p");
  EXPECT_EQ(s->num_kv_holds(), 0);
  EXPECT_EQ(s->kv_cache().Usage(), 0.0);
  s->ReleaseKvHold("p");  // twice: no-op
  EXPECT_EQ(s->metrics().counters.kv_exports, 1);
}

TEST(SchedulerKvTransferTest, AbortedExportPinsNothing) {
  TransferConnector c;
  auto s = std::move(Scheduler::Create(Options(16, &c))).value();
  Request r = Req("p", 10, 5);
  r.export_kv = true;
  ASSERT_TRUE(s->AddRequest(std::move(r)).ok());
  ASSERT_TRUE(s->AbortRequest("p").ok());
  EXPECT_TRUE(c.TakePending().exports.empty());
  EXPECT_EQ(s->kv_cache().Usage(), 0.0);
}

// The loads the scheduler planned for the connector (its pulls to start;
// what else it recorded is dropped).
std::vector<TransferConnector::Pull> Plan(Scheduler& s, TransferConnector& c) {
  s.PlanKvLoads(c);
  return c.TakePending().pulls;
}

// The prefill-side blocks a pull reads.
std::vector<int32_t> RemoteBlocks(const TransferConnector::Pull& p) {
  const auto first = p.source.block_ids.begin() + p.plan.first_block;
  return std::vector<int32_t>(first, first + static_cast<int64_t>(p.plan.blocks.size()));
}

Request Remote(const std::string& id, int prompt_len, std::vector<int32_t> remote_blocks) {
  Request r = Req(id, prompt_len, 2);
  r.remote_kv = RemoteKvSource{"127.0.0.1", 1234, "h-" + id, "e", std::move(remote_blocks), ""};
  return r;
}

TEST(SchedulerKvTransferTest, LoadsOnlyBlocksMissingFromThePrefixCache) {
  TransferConnector c;
  auto s = std::move(Scheduler::Create(Options(32, &c))).value();
  // 8 tokens computed locally: 2 full blocks cached.
  ASSERT_TRUE(s->AddRequest(Req("warm", 8, 1)).ok());
  RunAll(*s);
  // 17 tokens: 4 full blocks; the remote holds all 4; 2 are here already.
  ASSERT_TRUE(s->AddRequest(Remote("d", 17, {40, 41, 42, 43})).ok());
  std::vector<TransferConnector::Pull> loads = Plan(*s, c);
  ASSERT_EQ(loads.size(), 1u);
  EXPECT_EQ(loads[0].plan.first_block, 2);
  EXPECT_EQ(RemoteBlocks(loads[0]), (std::vector<int32_t>{42, 43}));
  EXPECT_EQ(loads[0].plan.blocks.size(), 2u);
  EXPECT_EQ((loads[0].plan.first_block + static_cast<int64_t>(loads[0].plan.blocks.size())) * 4, 16);
  EXPECT_TRUE(Plan(*s, c).empty());  // tried once
  s->FinishKvLoad(loads[0].plan.id, /*ok=*/true);
  SchedulerOutput plan = s->Schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].start_position, 16);  // only the last token is computed here
  EXPECT_EQ(plan.seqs[0].block_ids[2], loads[0].plan.blocks[0]);
  EXPECT_EQ(plan.seqs[0].block_ids[3], loads[0].plan.blocks[1]);
  EXPECT_EQ(s->metrics().counters.kv_blocks_pulled, 2);
  EXPECT_EQ(s->metrics().counters.kv_blocks_reused, 2);
  // Prefix stats count each admission once: warm's 8 tokens (no hit), then d's
  // 17 with 16 hit (2 reused + 2 pulled blocks), not the load's own lookup too.
  EXPECT_EQ(s->metrics().counters.prefix_cache_queries, 8 + 17);
  EXPECT_EQ(s->metrics().counters.prefix_cache_hits, 16);
  EXPECT_TRUE(c.TakePending().releases.empty());  // the pull acknowledges the source itself
}

// A source the decode will not pull from is handed back for acknowledgement,
// so the prefill unpins its blocks now rather than at its pin timeout.
TEST(SchedulerKvTransferTest, SourceNotPulledFromIsReleased) {
  TransferConnector c;
  auto s = std::move(Scheduler::Create(Options(32, &c))).value();
  ASSERT_TRUE(s->AddRequest(Req("warm", 17, 1)).ok());
  RunAll(*s);  // 4 full blocks cached
  ASSERT_TRUE(s->AddRequest(Remote("d", 17, {40, 41, 42, 43})).ok());
  s->PlanKvLoads(c);
  TransferConnector::Pending pending = c.TakePending();
  EXPECT_TRUE(pending.pulls.empty());  // everything is here already
  std::vector<RemoteKvSource> rel = pending.releases;
  ASSERT_EQ(rel.size(), 1u);
  EXPECT_EQ(rel[0].handle, "h-d");
  EXPECT_EQ(rel[0].port, 1234);
  EXPECT_TRUE(c.TakePending().releases.empty());
  EXPECT_EQ(s->metrics().counters.kv_blocks_reused, 4);
}

TEST(SchedulerKvTransferTest, RequestEndedBeforeItsPullReleasesTheSource) {
  TransferConnector c;
  auto s = std::move(Scheduler::Create(Options(32, &c))).value();
  ASSERT_TRUE(s->AddRequest(Remote("d", 17, {40, 41, 42, 43})).ok());
  ASSERT_TRUE(s->AbortRequest("d").ok());  // its client left before the engine loop planned the pull
  s->PlanKvLoads(c);
  TransferConnector::Pending pending = c.TakePending();
  EXPECT_TRUE(pending.pulls.empty());
  std::vector<RemoteKvSource> rel = pending.releases;
  ASSERT_EQ(rel.size(), 1u);
  EXPECT_EQ(rel[0].handle, "h-d");
}

TEST(SchedulerKvTransferTest, FailedLoadRecomputesAndCachesNothing) {
  TransferConnector c;
  auto s = std::move(Scheduler::Create(Options(32, &c))).value();
  ASSERT_TRUE(s->AddRequest(Remote("d", 17, {40, 41, 42, 43})).ok());
  std::vector<TransferConnector::Pull> loads = Plan(*s, c);
  ASSERT_EQ(loads.size(), 1u);
  EXPECT_EQ(loads[0].plan.blocks.size(), 4u);
  s->FinishKvLoad(loads[0].plan.id, /*ok=*/false);
  EXPECT_EQ(s->kv_cache().Usage(), 0.0);
  SchedulerOutput plan = s->Schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].start_position, 0);  // nothing was taken from the failed load
  EXPECT_EQ(s->metrics().counters.kv_pull_failures, 1);
}

TEST(SchedulerKvTransferTest, RemoteSourceNeverCoversTheLastPromptToken) {
  TransferConnector c;
  auto s = std::move(Scheduler::Create(Options(32, &c))).value();
  // 16 tokens = 4 full blocks, but the last token must be computed here for its logits: 3 pulled.
  ASSERT_TRUE(s->AddRequest(Remote("d", 16, {40, 41, 42, 43})).ok());
  std::vector<TransferConnector::Pull> loads = Plan(*s, c);
  ASSERT_EQ(loads.size(), 1u);
  EXPECT_EQ(RemoteBlocks(loads[0]), (std::vector<int32_t>{40, 41, 42}));
}

// The pull writes into the blocks until FinishKvLoad: an abort meanwhile ends
// the request but leaves the blocks held; FinishKvLoad frees them (uncached).
TEST(SchedulerKvTransferTest, AbortDuringLoadFreesItsBlocksWhenTheLoadEnds) {
  TransferConnector c;
  auto s = std::move(Scheduler::Create(Options(32, &c))).value();
  ASSERT_TRUE(s->AddRequest(Remote("d", 17, {40, 41, 42, 43})).ok());
  std::vector<TransferConnector::Pull> loads = Plan(*s, c);
  ASSERT_EQ(loads.size(), 1u);
  const double loading = s->kv_cache().Usage();
  EXPECT_GT(loading, 0.0);
  ASSERT_TRUE(s->AbortRequest("d").ok());
  EXPECT_FALSE(s->HasUnfinished());
  EXPECT_EQ(s->kv_cache().Usage(), loading) << "blocks freed while the pull may still write them";
  s->FinishKvLoad(loads[0].plan.id, /*ok=*/true);
  EXPECT_EQ(s->kv_cache().Usage(), 0.0);
  // Nothing of the aborted load joined the prefix cache.
  ASSERT_TRUE(s->AddRequest(Req("again", 17, 1)).ok());
  SchedulerOutput plan = s->Schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].start_position, 0);
}

// A sequence whose load is in flight is never admitted, and its blocks are no
// one else's: other requests are scheduled (and preempted) around it.
TEST(SchedulerKvTransferTest, SequenceLoadingIsNotScheduledUntilTheLoadEnds) {
  TransferConnector c;
  auto s = std::move(Scheduler::Create(Options(8, &c))).value();  // 32 tokens of KV
  ASSERT_TRUE(s->AddRequest(Remote("d", 17, {40, 41, 42, 43})).ok());
  std::vector<TransferConnector::Pull> loads = Plan(*s, c);
  ASSERT_EQ(loads.size(), 1u);
  ASSERT_EQ(loads[0].plan.blocks.size(), 4u);
  EXPECT_TRUE(s->WaitingOnLoadsOnly());
  EXPECT_TRUE(s->Schedule().empty());
  // Another request runs in the 4 blocks left, to its end.
  ASSERT_TRUE(s->AddRequest(Req("a", 9, 6, 500)).ok());
  EXPECT_FALSE(s->WaitingOnLoadsOnly());
  for (int i = 0; i < 20 && s->num_running() + s->num_waiting() > 1; ++i) {
    SchedulerOutput plan = s->Schedule();
    std::vector<SampledTokens> sampled;
    for (const ScheduledSequence& ss : plan.seqs) {
      EXPECT_EQ(ss.request_id, "a");
      for (BlockId b : ss.block_ids) {
        EXPECT_EQ(std::count(loads[0].plan.blocks.begin(), loads[0].plan.blocks.end(), b), 0);
      }
      if (ss.sample) sampled.push_back({ss.seq_id, {7}});
    }
    ASSERT_TRUE(s->UpdateFromOutput(sampled).ok());
  }
  EXPECT_EQ(s->num_running(), 0);
  EXPECT_EQ(s->num_waiting(), 1);
  s->FinishKvLoad(loads[0].plan.id, /*ok=*/true);
  SchedulerOutput plan = s->Schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].request_id, "d");
  EXPECT_EQ(plan.seqs[0].start_position, 16);
}

}  // namespace
}  // namespace tessera
