// Test helpers for driving a Scheduler without a model: requests of
// consecutive token ids, and steps in which every sampled sequence gets the
// same token.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "scheduler/scheduler.h"

namespace tessera::testing {

// A request whose prompt is `prompt_len` consecutive ids from `first`.
inline Request ConsecutiveRequest(const std::string& id, int prompt_len, int max_tokens, int first = 10) {
  Request r;
  r.id = id;
  for (int i = 0; i < prompt_len; ++i) r.prompt_token_ids.push_back(first + i);
  r.params.max_tokens = max_tokens;
  return r;
}

// Runs steps (at most 100) until nothing is left; every sampled sequence gets token 7.
inline void RunAll(Scheduler& s) {
  for (int i = 0; i < 100 && s.HasUnfinished(); ++i) {
    SchedulerOutput plan = s.Schedule();
    std::vector<SampledTokens> sampled;
    for (const ScheduledSequence& ss : plan.seqs) {
      if (ss.sample) sampled.push_back({ss.seq_id, {7}});
    }
    ASSERT_TRUE(s.UpdateFromOutput(sampled).ok());
  }
}

}  // namespace tessera::testing
