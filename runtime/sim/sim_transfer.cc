#include "runtime/sim/sim_transfer.h"

#include <algorithm>

namespace tessera::sim {

int64_t KvTransferModel::PullNs(int64_t bytes) const {
  const double ns = latency_ms * 1e6 + static_cast<double>(bytes) / bandwidth_gb_s;  // GB/s = bytes per ns
  return std::max<int64_t>(0, static_cast<int64_t>(ns + 0.5));
}

int64_t SimTransferConnector::TakeHeldBlocks(const std::string& request_id) {
  auto it = held_.find(request_id);
  if (it == held_.end()) return 0;
  const int64_t n = it->second;
  held_.erase(it);
  return n;
}

int64_t SimTransferConnector::MaxBlocks(const Request& request) const {
  return request.remote_kv ? static_cast<int64_t>(request.remote_kv->block_ids.size()) : 0;
}

void SimTransferConnector::OnLoadPlanned(const Request& request, const KvLoadPlan& plan) {
  // The transfer thread takes pulls in turn: this one starts when the last ends.
  const int64_t bytes = static_cast<int64_t>(plan.hashes.size()) * block_size_ * model_.kv_bytes_per_token;
  const int64_t start = std::max(now_ns_, link_free_ns_);
  const int64_t end = start + model_.PullNs(bytes);
  link_free_ns_ = end;
  in_flight_.push_back({plan.id, request.remote_kv->port, request.remote_kv->handle, end});
  pulls_.push_back({request.id, bytes, start, end});
}

void SimTransferConnector::OnNoLoad(const Request& request, KvNoLoad /*why*/, int64_t /*cached_blocks*/) {
  // Acknowledged without a pull: the source frees its blocks now.
  if (request.remote_kv) release_(request.remote_kv->port, request.remote_kv->handle, now_ns_);
}

void SimTransferConnector::OnHeld(const std::string& request_id, std::span<const BlockId> blocks,
                                  std::span<const BlockHash> /*hashes*/) {
  held_[request_id] = static_cast<int64_t>(blocks.size());
}

void SimTransferConnector::BeforeStep(Scheduler& scheduler, int64_t now_ns) {
  now_ns_ = now_ns;
  auto due = std::partition(releases_.begin(), releases_.end(), [&](const Release& r) { return r.at_ns > now_ns; });
  for (auto it = due; it != releases_.end(); ++it) scheduler.ReleaseKvHold(it->handle);
  releases_.erase(due, releases_.end());
  while (!in_flight_.empty() && in_flight_.front().end_ns <= now_ns) {
    const InFlight done = in_flight_.front();
    in_flight_.erase(in_flight_.begin());
    scheduler.FinishKvLoad(done.load_id, true);
    release_(done.source, done.handle, done.end_ns);
  }
  scheduler.PlanKvLoads(*this);
}

int64_t SimTransferConnector::NextDoneNs() const {
  int64_t t = in_flight_.empty() ? kNever : in_flight_.front().end_ns;
  for (const Release& r : releases_) t = std::min(t, r.at_ns);
  return t;
}

}  // namespace tessera::sim
