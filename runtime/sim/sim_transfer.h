// The PD KV transfer in the twin (docs/architecture.md, "Twin" and
// "Disaggregation"): the transfer connector's scheduler half — the same
// decisions as runtime/kv_connectors/transfer_connector.h: offers a request
// that carries a remote source, at most the source's blocks, destination
// blocks allocated before the load, holds an exporting request's blocks on
// finish — with its executor half replaced by a modelled link: one pull at a
// time per decode instance (its transfer thread), each taking
// KvTransferModel::PullNs of the bytes it moves, on the virtual clock.
//
// Both roles use one class, as serving does: a prefill instance's holds are
// released at the time the decode's pull ends (its acknowledgement) or when
// the decode will not pull; a decode instance's pulls end by FinishKvLoad.
// Single-threaded (the twin's driver); no bytes move.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/sim/cluster.h"
#include "runtime/sim/twin_instance.h"
#include "scheduler/kv_connector.h"

namespace tessera::sim {

class SimTransferConnector final : public KvConnector, public TwinKvWorker {
 public:
  struct Pull {
    std::string request_id;
    int64_t bytes = 0;
    int64_t start_ns = 0, end_ns = 0;
  };
  // The decode side tells the source (RemoteKvSource::port: the prefill
  // instance's index) that `handle` may be released at `at_ns`.
  using ReleaseFn = std::function<void(int32_t source, const std::string& handle, int64_t at_ns)>;

  SimTransferConnector(KvTransferModel model, int64_t block_size, ReleaseFn release)
      : model_(model), block_size_(block_size), release_(std::move(release)) {}

  // Prefill side: free `handle`'s held blocks at the first step begin at or after `at_ns`.
  void ReleaseAt(const std::string& handle, int64_t at_ns) { releases_.push_back({handle, at_ns}); }
  // Prefill side: the prompt blocks held for `request_id` when it finished (0: none); forgets them.
  int64_t TakeHeldBlocks(const std::string& request_id);
  // Decode side: every pull started so far, in order.
  const std::vector<Pull>& pulls() const { return pulls_; }

  // KvConnector (scheduler half).
  const char* name() const override { return "transfer"; }
  Allocation allocation() const override { return Allocation::kBeforeLoad; }
  bool Offers(const Request& request) const override { return request.remote_kv.has_value(); }
  int64_t MaxBlocks(const Request& request) const override;
  void OnLoadPlanned(const Request& request, const KvLoadPlan& plan) override;
  void OnNoLoad(const Request& request, KvNoLoad why, int64_t cached_blocks) override;
  bool HoldsOnFinish(const Request& request) const override { return request.export_kv; }
  void OnHeld(const std::string& request_id, std::span<const BlockId> blocks,
              std::span<const BlockHash> hashes) override;

  // TwinKvWorker (executor half).
  void BeforeStep(Scheduler& scheduler, int64_t now_ns) override;
  int64_t NextDoneNs() const override;
  bool LoadsInFlight() const override { return !in_flight_.empty(); }

 private:
  struct InFlight {
    uint64_t load_id = 0;
    int32_t source = 0;
    std::string handle;
    int64_t end_ns = 0;
  };
  struct Release {
    std::string handle;
    int64_t at_ns = 0;
  };

  KvTransferModel model_;
  int64_t block_size_;
  ReleaseFn release_;
  int64_t now_ns_ = 0;      // the current BeforeStep's time
  int64_t link_free_ns_ = 0;  // when the transfer thread finishes its last pull
  std::vector<InFlight> in_flight_;  // by end time (pulls run in turn)
  std::vector<Release> releases_;
  std::unordered_map<std::string, int64_t> held_;  // prefill: request id -> held blocks
  std::vector<Pull> pulls_;
};

}  // namespace tessera::sim
