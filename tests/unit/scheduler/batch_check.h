// Test helper: the invariants engine/model.cc CheckBatch enforces on a
// ForwardBatch, restated independently (tests must not trust the code under
// test to check itself).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "engine/forward_batch.h"

namespace tessera {

inline ::testing::AssertionResult BatchIsConsistent(const ForwardBatch& b, int64_t num_blocks, int64_t block_size) {
  const int64_t t = b.num_tokens();
  if (t == 0) return ::testing::AssertionFailure() << "no tokens";
  if (static_cast<int64_t>(b.positions.size()) != t || static_cast<int64_t>(b.token_to_seq.size()) != t ||
      static_cast<int64_t>(b.slot_mapping.size()) != t) {
    return ::testing::AssertionFailure() << "per-token arrays differ in length";
  }
  if (b.num_seqs <= 0 || b.max_blocks_per_seq <= 0 ||
      static_cast<int64_t>(b.block_tables.size()) != b.num_seqs * b.max_blocks_per_seq) {
    return ::testing::AssertionFailure() << "block_tables shape";
  }
  for (int32_t blk : b.block_tables) {
    if (blk < -1 || blk >= num_blocks) return ::testing::AssertionFailure() << "block id " << blk;
  }
  for (int64_t i = 0; i < t; ++i) {
    const int32_t seq = b.token_to_seq[i];
    if (seq < 0 || seq >= b.num_seqs) return ::testing::AssertionFailure() << "token_to_seq " << seq;
    const int64_t pos = b.positions[i];
    if (pos < 0 || pos / block_size >= b.max_blocks_per_seq) {
      return ::testing::AssertionFailure() << "position " << pos << " past the table";
    }
    const int32_t blk = b.block_tables[seq * b.max_blocks_per_seq + pos / block_size];
    if (blk < 0) return ::testing::AssertionFailure() << "position " << pos << " not covered";
    if (b.slot_mapping[i] != static_cast<int64_t>(blk) * block_size + pos % block_size) {
      return ::testing::AssertionFailure() << "slot_mapping[" << i << "] disagrees with the table";
    }
  }
  for (int32_t r : b.logits_indices) {
    if (r < 0 || r >= t) return ::testing::AssertionFailure() << "logits index " << r;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tessera
