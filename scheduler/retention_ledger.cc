#include "scheduler/retention_ledger.h"

#include <functional>

namespace tessera {

RetentionLedger::RetentionLedger(RetentionOptions options, int32_t block_size)
    : options_(options), block_size_(block_size) {}

void RetentionLedger::Expire(int64_t now_ns) {
  while (!endings_.empty() && endings_.top().until_ns <= now_ns) {
    const Ending e = endings_.top();
    endings_.pop();
    auto t = tenants_.find(e.tenant);
    if (t == tenants_.end()) continue;
    auto h = t->second.until.find(e.hash);
    if (h == t->second.until.end() || h->second != e.until_ns) continue;  // extended since: stale
    t->second.until.erase(h);
    --total_blocks_;
    if (t->second.until.empty()) tenants_.erase(t);
  }
}

Status RetentionLedger::Admit(const std::string& tenant, std::span<const BlockHash> hashes,
                              std::span<const int64_t> until_ns, int64_t now_ns, const std::string& field) {
  Expire(now_ns);
  const std::string at = "'" + field + "': ";
  if (options_.max_tokens == 0) {
    return InvalidArgument(at + "prompt retention is off on this server (--retention-max-tokens 0)");
  }
  const int64_t asked = static_cast<int64_t>(hashes.size()) * block_size_;
  const int64_t per_key = PerKeyTokens();
  if (asked > per_key || asked > options_.max_tokens) {
    const bool key = per_key <= options_.max_tokens;
    return InvalidArgument(at + "retaining " + std::to_string(asked) + " prompt tokens exceeds the " +
                           (key ? "per-key" : "server's") + " retention budget of " +
                           std::to_string(key ? per_key : options_.max_tokens) + " tokens (" +
                           (key ? "--retention-per-key-tokens" : "--retention-max-tokens") +
                           "); mark a shorter prefix");
  }
  auto t = tenants_.find(tenant);
  int64_t fresh = 0;  // blocks this tenant does not hold yet
  for (const BlockHash& h : hashes) fresh += t == tenants_.end() || t->second.until.count(h) == 0;
  const int64_t held = t == tenants_.end() ? 0 : static_cast<int64_t>(t->second.until.size());
  if ((held + fresh) * block_size_ > per_key) {
    return ResourceExhausted(at + "this API key already retains " + std::to_string(held * block_size_) +
                             " prompt tokens; " + std::to_string(fresh * block_size_) + " more exceed its budget of " +
                             std::to_string(per_key) + " tokens (--retention-per-key-tokens) until holds expire");
  }
  if ((total_blocks_ + fresh) * block_size_ > options_.max_tokens) {
    return ResourceExhausted(at + "the server's retention budget of " + std::to_string(options_.max_tokens) +
                             " tokens is taken (--retention-max-tokens) until holds expire");
  }
  Tenant& mine = tenants_[tenant];
  for (size_t i = 0; i < hashes.size(); ++i) {
    auto [it, added] = mine.until.emplace(hashes[i], until_ns[i]);
    total_blocks_ += added;
    if (!added && it->second >= until_ns[i]) continue;
    it->second = until_ns[i];
    endings_.push({until_ns[i], tenant, hashes[i]});
  }
  return Status::Ok();
}

int64_t RetentionLedger::tenant_tokens(const std::string& tenant) const {
  auto t = tenants_.find(tenant);
  return t == tenants_.end() ? 0 : static_cast<int64_t>(t->second.until.size()) * block_size_;
}

}  // namespace tessera
