#include "runtime/plan_to_batch.h"

#include <algorithm>

namespace tessera {

StatusOr<ForwardBatch> MakeForwardBatch(const SchedulerOutput& plan, int32_t block_size) {
  if (plan.seqs.empty()) return InvalidArgument("forward batch: the plan schedules no sequence");
  ForwardBatch b;
  b.num_seqs = static_cast<int64_t>(plan.seqs.size());
  b.max_blocks_per_seq = 1;
  for (const ScheduledSequence& s : plan.seqs) {
    b.max_blocks_per_seq = std::max<int64_t>(b.max_blocks_per_seq, static_cast<int64_t>(s.block_ids.size()));
  }
  b.block_tables.assign(static_cast<size_t>(b.num_seqs * b.max_blocks_per_seq), -1);
  b.token_ids.reserve(plan.num_scheduled_tokens);
  b.positions.reserve(plan.num_scheduled_tokens);
  b.token_to_seq.reserve(plan.num_scheduled_tokens);
  b.slot_mapping.reserve(plan.num_scheduled_tokens);
  for (int64_t row = 0; row < b.num_seqs; ++row) {
    const ScheduledSequence& s = plan.seqs[row];
    std::copy(s.block_ids.begin(), s.block_ids.end(), b.block_tables.begin() + row * b.max_blocks_per_seq);
    const int32_t first_row = static_cast<int32_t>(b.token_ids.size());
    for (size_t i = 0; i < s.token_ids.size(); ++i) {
      const int64_t pos = s.start_position + static_cast<int64_t>(i);
      const int64_t blk = pos / block_size;
      if (blk >= static_cast<int64_t>(s.block_ids.size())) {
        return Internal("forward batch: position " + std::to_string(pos) + " of sequence " +
                        std::to_string(s.seq_id) + " is past its " + std::to_string(s.block_ids.size()) +
                        " blocks");
      }
      b.token_ids.push_back(s.token_ids[i]);
      b.positions.push_back(static_cast<int32_t>(pos));
      b.token_to_seq.push_back(static_cast<int32_t>(row));
      b.slot_mapping.push_back(static_cast<int64_t>(s.block_ids[blk]) * block_size + pos % block_size);
    }
    const int32_t n = static_cast<int32_t>(s.token_ids.size());
    for (int32_t i = n - std::min(s.num_logits, n); i < n; ++i) b.logits_indices.push_back(first_row + i);
  }
  return b;
}

}  // namespace tessera
