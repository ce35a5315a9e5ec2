// Shared by the twin's unit tests: a small scheduler (block 16, vocab 1000,
// 8 sequences) whose pool and token budget each test chooses.
#pragma once

#include <cstdint>

#include "scheduler/scheduler.h"

namespace tessera::sim {

inline SchedulerOptions SmallSchedulerOptions(int32_t num_blocks, int64_t budget) {
  SchedulerOptions so;
  so.max_num_seqs = 8;
  so.max_num_batched_tokens = budget;
  so.kv.num_blocks = num_blocks;
  so.kv.block_size = 16;
  so.limits.max_model_len = 1024;
  so.limits.vocab_size = 1000;
  return so;
}

}  // namespace tessera::sim
