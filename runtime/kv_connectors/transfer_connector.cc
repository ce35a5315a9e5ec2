#include "runtime/kv_connectors/transfer_connector.h"
#include "common/log.h"


#include "runtime/engine_loop.h"

namespace tessera {

TransferConnector::TransferConnector(std::unique_ptr<KvTransport> transport,
                                     std::function<void(const KvPullEvent&)> on_pull, std::function<void()> notify)
    : on_pull_(std::move(on_pull)), transport_(std::move(transport)) {
  puller_ = std::make_unique<KvPuller>(transport_.get(), std::move(notify));
}

TransferConnector::~TransferConnector() { puller_.reset(); }

TransferConnector::Pending TransferConnector::TakePending() {
  Pending out;
  std::swap(out, pending_);
  return out;
}

int64_t TransferConnector::MaxBlocks(const Request& request) const {
  return request.remote_kv ? static_cast<int64_t>(request.remote_kv->block_ids.size()) : 0;
}

void TransferConnector::OnLoadPlanned(const Request& request, const KvLoadPlan& plan) {
  pending_.pulls.push_back({plan, *request.remote_kv});
}

void TransferConnector::OnNoLoad(const Request& request, KvNoLoad why, int64_t cached_blocks) {
  if (why == KvNoLoad::kAllCached) blocks_reused_ += cached_blocks;  // everything the source holds is here
  if (why == KvNoLoad::kNoRoom) ++pull_failures_;                    // prefilled here instead
  pending_.releases.push_back(*request.remote_kv);
}

void TransferConnector::OnLoadFinished(const KvLoadPlan& plan, int64_t loaded_blocks, bool ok) {
  if (!ok) {
    ++pull_failures_;
    return;
  }
  blocks_pulled_ += loaded_blocks;
  blocks_reused_ += plan.first_block;
}

void TransferConnector::OnHeld(const std::string& request_id, std::span<const BlockId> blocks,
                               std::span<const BlockHash> hashes) {
  pending_.exports.push_back({request_id, std::vector<BlockId>(blocks.begin(), blocks.end()),
                              std::vector<BlockHash>(hashes.begin(), hashes.end())});
  ++exports_;
}

void TransferConnector::AddCounters(SchedulerCounters* c) const {
  c->kv_blocks_pulled += blocks_pulled_;
  c->kv_blocks_reused += blocks_reused_;
  c->kv_pull_failures += pull_failures_;
  c->kv_exports += exports_;
}

void TransferConnector::BeforeStep(Scheduler& scheduler, KvCache& /*cache*/) {
  for (const std::string& handle : transport_->TakeReleased()) scheduler.ReleaseKvHold(handle);
  for (KvPuller::Done& d : puller_->TakeDone()) FinishPull(scheduler, d);
  scheduler.PlanKvLoads(*this);
  std::vector<Pull> pulls = std::move(pending_.pulls);
  pending_.pulls.clear();
  for (Pull& p : pulls) {
    KvPullSpec spec;
    spec.host = p.source.host;
    spec.port = p.source.port;
    spec.handle = p.source.handle;
    const size_t first = static_cast<size_t>(p.plan.first_block);
    spec.remote_blocks.assign(p.source.block_ids.begin() + first,
                              p.source.block_ids.begin() + first + p.plan.blocks.size());
    spec.local_blocks.assign(p.plan.blocks.begin(), p.plan.blocks.end());
    for (const BlockHash& h : p.plan.hashes) spec.keys.push_back({h.digest});
    // The puller's thread writes the bytes into the plan's blocks while the
    // loop keeps stepping other requests; the scheduler keeps those blocks
    // out of every batch (and unfreed) until FinishKvLoad.
    const uint64_t id = p.plan.id;
    in_flight_.emplace(id, std::move(p));
    puller_->Submit(id, std::move(spec));
  }
  // Exports this instance will never pull: acknowledged (on the puller's
  // thread, a gRPC call), so the prefill unpins them now.
  for (const RemoteKvSource& src : pending_.releases) puller_->Release(src.host, src.port, src.handle);
  pending_.releases.clear();
}

void TransferConnector::FinishPull(Scheduler& scheduler, KvPuller::Done& done) {
  auto it = in_flight_.find(done.id);
  if (it == in_flight_.end()) return;
  const Pull pull = std::move(it->second);
  in_flight_.erase(it);
  const StatusOr<KvPullStats>& st = done.result;
  if (!st.ok()) {
    LogWarn("kv transfer: request '{}': {}; computing its prompt here instead", pull.plan.request_id,
            st.status().ToString());
  }
  scheduler.FinishKvLoad(pull.plan.id, st.ok());
  if (on_pull_) {
    KvPullEvent e;
    e.ok = st.ok();
    e.bytes = st.ok() ? st->bytes : 0;
    e.seconds = st.ok() ? st->seconds : 0;
    e.blocks_pulled = st.ok() ? static_cast<int64_t>(pull.plan.blocks.size()) : 0;
    e.blocks_reused = pull.plan.first_block;
    e.peer = pull.source.host + ":" + std::to_string(pull.source.port);
    on_pull_(e);
  }
}

void TransferConnector::AfterStep(KvCache& /*cache*/) {
  for (Export& e : pending_.exports) {
    std::vector<KvBlockKey> keys;
    for (const BlockHash& h : e.hashes) keys.push_back({h.digest});
    std::vector<int32_t> blocks(e.blocks.begin(), e.blocks.end());
    transport_->Export(e.request_id, blocks, std::move(keys));
    KvExportInfo info;
    info.engine_id = transport_->engine_id();
    info.host = transport_->host();
    info.port = transport_->port();
    info.handle = e.request_id;
    info.block_ids = std::move(blocks);
    info.signature = transport_->SignExport({info.host, info.port, info.handle, info.engine_id, &info.block_ids});
    final_info_[e.request_id] = std::move(info);
  }
  pending_.exports.clear();
}

Status TransferConnector::CheckSource(const RemoteKvSource& s) const {
  return transport_->CheckSource({s.host, s.port, s.handle, s.engine_id, &s.block_ids}, s.signature);
}

void TransferConnector::OnFinalOutput(const std::string& request_id, RequestOutput* out) {
  auto it = final_info_.find(request_id);
  if (it == final_info_.end()) return;
  out->kv_export = std::move(it->second);
  final_info_.erase(it);
}

void TransferConnector::ForgetRequest(const std::string& request_id) { final_info_.erase(request_id); }

void TransferConnector::Stop(Scheduler& scheduler) {
  puller_->Stop();
  for (KvPuller::Done& d : puller_->TakeDone()) FinishPull(scheduler, d);
}

}  // namespace tessera
