#include "runtime/plan_to_batch.h"

#include <gtest/gtest.h>

#include <numeric>

#include "scheduler/scheduler.h"
#include "tests/unit/scheduler/batch_check.h"

namespace tessera {
namespace {

TEST(PlanToBatchTest, FlattensAPlanTheEngineAccepts) {
  SchedulerOptions o;
  o.max_num_seqs = 4;
  o.max_num_batched_tokens = 20;
  o.kv = {32, 4, true};
  o.limits.max_model_len = 256;
  auto s = std::move(Scheduler::Create(o)).value();
  for (int i = 0; i < 3; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    r.prompt_token_ids.assign(7 + 5 * i, 3 + i);
    r.params.max_tokens = 4;
    ASSERT_TRUE(s->AddRequest(r).ok());
  }
  for (int step = 0; step < 6; ++step) {
    SchedulerOutput plan = s->Schedule();
    if (plan.empty()) break;
    auto b = MakeForwardBatch(plan, 4);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ASSERT_TRUE(BatchIsConsistent(*b, 32, 4));
    // Row by row: tokens, positions and slots follow each sequence's table.
    int64_t row = 0;
    size_t logits = 0;
    for (size_t i = 0; i < plan.seqs.size(); ++i) {
      const ScheduledSequence& ss = plan.seqs[i];
      for (size_t j = 0; j < ss.token_ids.size(); ++j, ++row) {
        const int64_t pos = ss.start_position + static_cast<int64_t>(j);
        EXPECT_EQ(b->token_ids[row], ss.token_ids[j]);
        EXPECT_EQ(b->positions[row], pos);
        EXPECT_EQ(b->token_to_seq[row], static_cast<int32_t>(i));
        EXPECT_EQ(b->slot_mapping[row], ss.block_ids[pos / 4] * 4 + pos % 4);
      }
      for (int64_t k = 0; k < b->max_blocks_per_seq; ++k) {
        const int32_t want = k < static_cast<int64_t>(ss.block_ids.size()) ? ss.block_ids[k] : -1;
        EXPECT_EQ(b->block_tables[i * b->max_blocks_per_seq + k], want);
      }
      if (ss.num_logits > 0) {
        ASSERT_LT(logits, b->logits_indices.size());
        EXPECT_EQ(b->logits_indices[logits++], row - 1);  // the sequence's last token
      }
    }
    EXPECT_EQ(logits, b->logits_indices.size());
    EXPECT_EQ(b->num_tokens(), plan.num_scheduled_tokens);
    std::vector<SampledTokens> sampled;
    for (const ScheduledSequence& ss : plan.seqs) {
      if (ss.sample) sampled.push_back({ss.seq_id, {5}});
    }
    ASSERT_TRUE(s->UpdateFromOutput(sampled).ok());
  }
  EXPECT_EQ(MakeForwardBatch(SchedulerOutput{}, 4).status().code(), StatusCode::kInvalidArgument);
}

TEST(PlanToBatchTest, UncoveredPositionIsAnInternalError) {
  SchedulerOutput plan;
  ScheduledSequence ss;
  ss.start_position = 4;
  ss.token_ids = {1};
  ss.block_ids = {0};
  plan.seqs.push_back(ss);
  EXPECT_EQ(MakeForwardBatch(plan, 4).status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace tessera
