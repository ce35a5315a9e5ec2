// BatchBuilder: turns "these tokens of these sequences run now" into a
// ForwardBatch with block tables and slot mapping, allocating KV blocks from a
// simple free list. For offline tools, benchmarks and tests; the serving path
// uses the scheduler's KvCacheManager (prefix caching, preemption) instead.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"
#include "engine/forward_batch.h"

namespace tessera {

class BatchBuilder {
 public:
  // Blocks are handed out in `block_order` when given (tests use a shuffled
  // order to exercise non-contiguous tables), else 0, 1, 2, ...
  BatchBuilder(int64_t num_blocks, int64_t block_size, std::vector<int32_t> block_order = {});

  // Starts a sequence with no tokens; returns its id.
  int AddSequence();
  // Frees the sequence's blocks.
  void RemoveSequence(int seq);
  int64_t length(int seq) const { return seqs_[seq].length; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }

  struct Chunk {
    int seq = 0;
    std::vector<int32_t> tokens;      // appended at positions length(seq) ...
    std::vector<int32_t> logits_at;   // offsets within `tokens` to return logits for
  };
  // Appends every chunk's tokens to its sequence and builds the step. Each
  // sequence may appear at most once. Fails (leaving state unchanged) when out
  // of blocks.
  StatusOr<ForwardBatch> Build(const std::vector<Chunk>& chunks);

 private:
  struct Seq {
    int64_t length = 0;
    std::vector<int32_t> blocks;
    bool live = false;
  };
  int64_t block_size_;
  std::vector<int32_t> free_;  // back() is handed out next
  std::vector<Seq> seqs_;
};

}  // namespace tessera
