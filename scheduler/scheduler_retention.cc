// Scheduler: retention (docs/architecture.md, "Retention") — booking a
// request's retained prefixes against the budgets, and holding their blocks
// in the pool as they are cached.
#include <algorithm>

#include "scheduler/scheduler.h"

namespace tessera {

StatusOr<std::vector<Sequence::Hold>> Scheduler::AdmitRetention(const Request& request, int64_t now_ns) {
  const Retention& r = request.retention;
  const std::string field = r.field.empty() ? "retention" : r.field;
  if (!kv_->caching_enabled()) {
    ++counters_.retention_rejected_too_large;
    return InvalidArgument("'" + field + "': prompt retention needs the prefix cache, which is off on this server");
  }
  const int64_t bs = kv_->block_size();
  const int64_t prompt = static_cast<int64_t>(request.prompt_token_ids.size());
  std::vector<Sequence::Hold> holds;
  int64_t longest = 0;
  for (const RetainedPrefix& p : r.prefixes) {
    const int64_t blocks = std::min(p.num_tokens, prompt) / bs;  // only full blocks are cached
    if (blocks <= 0 || p.ttl_ns <= 0) continue;
    holds.push_back({blocks, now_ns + p.ttl_ns});
    longest = std::max(longest, blocks);
  }
  if (holds.empty()) return holds;
  std::vector<BlockHash> hashes;
  kv_->hash_scheme().ExtendBlockHashes(std::span<const int32_t>(request.prompt_token_ids).first(longest * bs),
                                       kv_->block_size(), request.cache_keys, request.cache_salt, &hashes);
  std::vector<int64_t> until(hashes.size(), 0);  // block i: the latest hold covering it
  for (const Sequence::Hold& h : holds) {
    for (int64_t i = 0; i < h.blocks; ++i) until[i] = std::max(until[i], h.until_ns);
  }
  Status s = retention_.Admit(r.tenant, hashes, until, now_ns, field);
  if (!s.ok()) {
    ++(s.code() == StatusCode::kResourceExhausted ? counters_.retention_rejected_full
                                                  : counters_.retention_rejected_too_large);
    return s;
  }
  return holds;
}

void Scheduler::ApplyRetention(Sequence* seq) {
  bool pending = false;
  const int64_t cached = std::min(seq->num_computed_tokens, seq->num_tokens()) / kv_->block_size();
  for (const Sequence::Hold& h : seq->retain) {
    kv_->RetainPrefix(seq->id, h.blocks, h.until_ns);
    pending = pending || cached < h.blocks;
  }
  seq->retain_pending = pending;
}

}  // namespace tessera
