// ForwardBatch: one engine step as plain data — all scheduled tokens of all
// sequences flattened (prefill chunks and decode tokens together).
#pragma once

#include <cstdint>
#include <vector>

namespace tessera {

struct ForwardBatch {
  // Per token, length T.
  std::vector<int32_t> token_ids;
  std::vector<int32_t> positions;      // absolute position in its sequence
  std::vector<int32_t> token_to_seq;   // row in block_tables
  std::vector<int64_t> slot_mapping;   // KV slot = block * block_size + offset
  // Per sequence: block ids, padded with -1 to max_blocks_per_seq.
  std::vector<int32_t> block_tables;   // [num_seqs, max_blocks_per_seq]
  int64_t num_seqs = 0;
  int64_t max_blocks_per_seq = 0;
  // Token rows whose logits are wanted, in output order.
  std::vector<int32_t> logits_indices;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
};

}  // namespace tessera
