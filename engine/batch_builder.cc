#include "engine/batch_builder.h"

#include <algorithm>

namespace tessera {

BatchBuilder::BatchBuilder(int64_t num_blocks, int64_t block_size, std::vector<int32_t> order)
    : block_size_(block_size) {
  if (order.empty()) {
    for (int64_t i = 0; i < num_blocks; ++i) order.push_back(static_cast<int32_t>(i));
  }
  free_.assign(order.rbegin(), order.rend());
}

int BatchBuilder::AddSequence() {
  seqs_.push_back(Seq{0, {}, true});
  return static_cast<int>(seqs_.size()) - 1;
}

void BatchBuilder::RemoveSequence(int seq) {
  Seq& s = seqs_[seq];
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) free_.push_back(*it);
  s = Seq{};
}

StatusOr<ForwardBatch> BatchBuilder::Build(const std::vector<Chunk>& chunks) {
  int64_t need = 0;
  std::vector<bool> seen(seqs_.size(), false);
  for (const Chunk& c : chunks) {
    if (c.seq < 0 || c.seq >= static_cast<int>(seqs_.size()) || !seqs_[c.seq].live) {
      return InvalidArgument("batch builder: unknown sequence " + std::to_string(c.seq));
    }
    if (seen[c.seq]) return InvalidArgument("batch builder: sequence appears twice in one step");
    seen[c.seq] = true;
    for (int32_t off : c.logits_at) {
      if (off < 0 || off >= static_cast<int32_t>(c.tokens.size())) {
        return InvalidArgument("batch builder: logits_at offset out of range");
      }
    }
    const Seq& s = seqs_[c.seq];
    const int64_t new_len = s.length + static_cast<int64_t>(c.tokens.size());
    need += std::max<int64_t>(0, (new_len + block_size_ - 1) / block_size_ - static_cast<int64_t>(s.blocks.size()));
  }
  if (need > static_cast<int64_t>(free_.size())) {
    return ResourceExhausted("batch builder: step needs " + std::to_string(need) + " KV blocks, " +
                             std::to_string(free_.size()) + " free");
  }
  ForwardBatch b;
  b.num_seqs = static_cast<int64_t>(chunks.size());
  for (const Chunk& c : chunks) {
    Seq& s = seqs_[c.seq];
    const int64_t new_len = s.length + static_cast<int64_t>(c.tokens.size());
    while (static_cast<int64_t>(s.blocks.size()) * block_size_ < new_len) {
      s.blocks.push_back(free_.back());
      free_.pop_back();
    }
    b.max_blocks_per_seq = std::max<int64_t>(b.max_blocks_per_seq, static_cast<int64_t>(s.blocks.size()));
  }
  b.max_blocks_per_seq = std::max<int64_t>(1, b.max_blocks_per_seq);
  b.block_tables.assign(b.num_seqs * b.max_blocks_per_seq, -1);
  for (size_t row = 0; row < chunks.size(); ++row) {
    const Chunk& c = chunks[row];
    Seq& s = seqs_[c.seq];
    std::copy(s.blocks.begin(), s.blocks.end(), b.block_tables.begin() + row * b.max_blocks_per_seq);
    const int32_t first_token = static_cast<int32_t>(b.token_ids.size());
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      const int64_t pos = s.length + static_cast<int64_t>(i);
      b.token_ids.push_back(c.tokens[i]);
      b.positions.push_back(static_cast<int32_t>(pos));
      b.token_to_seq.push_back(static_cast<int32_t>(row));
      b.slot_mapping.push_back(static_cast<int64_t>(s.blocks[pos / block_size_]) * block_size_ +
                               pos % block_size_);
    }
    for (int32_t off : c.logits_at) b.logits_indices.push_back(first_token + off);
    s.length += static_cast<int64_t>(c.tokens.size());
  }
  return b;
}

}  // namespace tessera
