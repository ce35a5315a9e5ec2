#include "engine/parallel/shard/sharded_forward.h"

#include <cstring>

namespace tessera::parallel {

ForwardBatch SubBatch(const ForwardBatch& b, int64_t seq_begin, int64_t seq_count, std::vector<int64_t>* rows) {
  ForwardBatch s;
  std::vector<int32_t> local(b.token_ids.size(), -1);
  for (int64_t i = 0; i < b.num_tokens(); ++i) {
    const int64_t seq = b.token_to_seq[i];
    if (seq < seq_begin || seq >= seq_begin + seq_count) continue;
    local[i] = static_cast<int32_t>(s.token_ids.size());
    s.token_ids.push_back(b.token_ids[i]);
    s.positions.push_back(b.positions[i]);
    s.token_to_seq.push_back(static_cast<int32_t>(seq - seq_begin));
    s.slot_mapping.push_back(b.slot_mapping[i]);
  }
  s.num_seqs = seq_count;
  s.max_blocks_per_seq = b.max_blocks_per_seq;
  s.block_tables.assign(b.block_tables.begin() + seq_begin * b.max_blocks_per_seq,
                        b.block_tables.begin() + (seq_begin + seq_count) * b.max_blocks_per_seq);
  rows->clear();
  for (size_t o = 0; o < b.logits_indices.size(); ++o) {
    const int32_t t = local[b.logits_indices[o]];
    if (t < 0) continue;
    s.logits_indices.push_back(t);
    rows->push_back(static_cast<int64_t>(o));
  }
  return s;
}

Status ShardedForward(Model& model, const ForwardBatch& b, KvCache* cache, std::vector<float>* logits) {
  const ModelShard* shard = model.shard();
  if (shard == nullptr || !shard->plan().options.data_parallel_attention) {
    RETURN_IF_ERROR(model.Forward(b, cache, logits));
    return shard == nullptr ? Status::Ok() : model.FinishParallelStep();
  }
  Communicator* comm = shard->comm();
  const int n = comm->world_size(), r = comm->rank();
  const int64_t vocab = model.config().vocab_size;
  std::vector<int64_t> rows;
  const ForwardBatch mine = SubBatch(b, SliceBegin(b.num_seqs, n, r), SliceCount(b.num_seqs, n, r), &rows);
  std::vector<float> local;
  if (mine.num_tokens() > 0) {
    RETURN_IF_ERROR(model.Forward(mine, cache, &local));
  } else {
    RETURN_IF_ERROR(model.ForwardIdle());
  }
  // Logits rows to rank 0, in rank order; every rank knows every rank's rows.
  std::vector<std::vector<int64_t>> rank_rows(n);
  for (int p = 0; p < n; ++p) {
    if (p == r) {
      rank_rows[p] = rows;
    } else {
      SubBatch(b, SliceBegin(b.num_seqs, n, p), SliceCount(b.num_seqs, n, p), &rank_rows[p]);
    }
  }
  std::vector<int64_t> send(n, 0), recv(n, 0);
  send[0] = static_cast<int64_t>(rows.size()) * vocab;
  if (r == 0) {
    for (int p = 0; p < n; ++p) recv[p] = static_cast<int64_t>(rank_rows[p].size()) * vocab;
  }
  std::vector<float> all(r == 0 ? b.logits_indices.size() * vocab + 1 : 1);
  if (local.empty()) local.resize(1);
  RETURN_IF_ERROR(comm->AllToAllV(local.data(), send, all.data(), recv, DType::kF32));
  logits->clear();
  RETURN_IF_ERROR(model.FinishParallelStep());
  if (r != 0) return Status::Ok();
  logits->resize(b.logits_indices.size() * vocab);
  int64_t at = 0;
  for (int p = 0; p < n; ++p) {
    for (int64_t o : rank_rows[p]) {
      std::memcpy(logits->data() + o * vocab, all.data() + at * vocab, static_cast<size_t>(vocab) * sizeof(float));
      ++at;
    }
  }
  return Status::Ok();
}

}  // namespace tessera::parallel
