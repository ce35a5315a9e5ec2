// TransferConnector: prefill/decode disaggregation (and peer fetch between
// unified instances) as a KV connector (docs/architecture.md,
// "Disaggregation", "KV connectors"). Both halves in one class:
//
//  - Prefill side (Request::export_kv): a request that ends other than by
//    abort keeps its blocks held; its prompt's full blocks are exported
//    through the KvTransport under the request id, and its final output
//    carries where to pull them (KvExportInfo). The peer's acknowledgement,
//    or the transport's pin timeout, releases the hold.
//  - Decode side (Request::remote_kv): before the request's prefill the
//    scheduler allocates fresh blocks for the prompt's full blocks its prefix
//    cache lacks (kBeforeLoad), and the KvPuller's thread reads them from the
//    prefill over UCX while the loop keeps stepping other requests. A source
//    it will not pull from (all cached here, no room, the request ended) is
//    acknowledged, so the prefill frees its blocks at once.
//
// Threading: scheduler-half methods are called by the Scheduler and worker
// methods by the engine loop, all on the loop thread; the puller and the
// transport's service run on their own threads and wake the loop through
// `notify`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/kv_transfer/kv_transport.h"
#include "runtime/kv_connectors/kv_connector_worker.h"
#include "runtime/kv_puller.h"
#include "scheduler/kv_connector.h"

namespace tessera {

// One pull attempt of a decode instance (metrics).
struct KvPullEvent {
  bool ok = false;
  int64_t bytes = 0;
  double seconds = 0;
  int64_t blocks_pulled = 0;
  int64_t blocks_reused = 0;
  std::string peer;  // host:port
};

class TransferConnector final : public KvConnector, public KvConnectorWorker {
 public:
  // What the scheduler half decided since the last TakePending(), as plain
  // data: the worker half acts on it; tests read it.
  struct Pull {
    KvLoadPlan plan;
    RemoteKvSource source;
  };
  struct Export {
    std::string request_id;
    std::vector<BlockId> blocks;
    std::vector<BlockHash> hashes;
  };
  struct Pending {
    std::vector<Pull> pulls;              // to start (destination blocks allocated)
    std::vector<RemoteKvSource> releases; // sources this instance will not pull from
    std::vector<Export> exports;          // held blocks to expose
  };

  // Serves and pulls through `transport` (not null; it must be created over
  // the same KvCache the scheduler's blocks index). `on_pull` (may be empty)
  // runs on the loop thread after each pull attempt.
  TransferConnector(std::unique_ptr<KvTransport> transport, std::function<void(const KvPullEvent&)> on_pull,
                    std::function<void()> notify);
  // The scheduler half alone (no transport): for scheduler tests, which read
  // TakePending(). The worker methods must not be called on it.
  TransferConnector() = default;
  ~TransferConnector() override;  // stops the puller before the transport

  const KvTransport* transport() const { return transport_.get(); }
  // Whether this instance may connect to `source` (KvTransport::CheckSource):
  // checked when a request is submitted, so a refused source is never pulled
  // from or released to. Any thread.
  Status CheckSource(const RemoteKvSource& source) const;
  Pending TakePending();

  // KvConnector (scheduler half).
  const char* name() const override { return "transfer"; }
  Allocation allocation() const override { return Allocation::kBeforeLoad; }
  bool Offers(const Request& request) const override { return request.remote_kv.has_value(); }
  int64_t MaxBlocks(const Request& request) const override;
  void OnLoadPlanned(const Request& request, const KvLoadPlan& plan) override;
  void OnNoLoad(const Request& request, KvNoLoad why, int64_t cached_blocks) override;
  void OnLoadFinished(const KvLoadPlan& plan, int64_t loaded_blocks, bool ok) override;
  bool HoldsOnFinish(const Request& request) const override { return request.export_kv; }
  void OnHeld(const std::string& request_id, std::span<const BlockId> blocks,
              std::span<const BlockHash> hashes) override;
  void AddCounters(SchedulerCounters* counters) const override;

  // KvConnectorWorker (executor half).
  void BeforeStep(Scheduler& scheduler, KvCache& cache) override;
  void AfterStep(KvCache& cache) override;
  bool LoadsInFlight() const override { return !in_flight_.empty(); }
  void OnFinalOutput(const std::string& request_id, RequestOutput* out) override;
  void ForgetRequest(const std::string& request_id) override;
  void Stop(Scheduler& scheduler) override;

 private:
  void FinishPull(Scheduler& scheduler, KvPuller::Done& done);

  // Decode side: prompt blocks pulled from a prefill, found in the local
  // prefix cache instead, pulls that failed (recomputed); prefill side:
  // requests whose blocks were held for a decode.
  int64_t blocks_pulled_ = 0;
  int64_t blocks_reused_ = 0;
  int64_t pull_failures_ = 0;
  int64_t exports_ = 0;

  Pending pending_;
  std::unordered_map<uint64_t, Pull> in_flight_;  // handed to the puller, by load id
  std::unordered_map<std::string, KvExportInfo> final_info_;  // exported, final output not yet pushed
  std::function<void(const KvPullEvent&)> on_pull_;
  // Last members: the puller (which calls the transport) is destroyed first.
  std::unique_ptr<KvTransport> transport_;
  std::unique_ptr<KvPuller> puller_;
};

}  // namespace tessera
