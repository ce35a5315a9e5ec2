// KvConnector: the scheduler's half of one place KV blocks come from or go
// to besides this instance's own forward passes (docs/architecture.md, "KV
// connectors"). One seam for every "KV from elsewhere", in the spirit of
// vLLM's KVConnectorBase_V1: the prefill/decode transfer (and peer fetch) and
// the host/disk/Redis tiers implement it (runtime/kv_connectors/); a new
// source is one class.
//
// The scheduler decides *which* blocks move and when; it never moves bytes.
// Its generic mechanism (scheduler_kv.cc):
//  - A new request's first choice is offered to each connector whose Offers()
//    accepts it (tiers: again after every preemption). Between steps
//    Scheduler::PlanKvLoads() asks each offered connector once: the leading
//    prompt blocks the pool lacks, up to MaxBlocks() and never the last
//    prompt token (its logits give the first output token). A connector that
//    allocates before loading (kBeforeLoad: the data plane writes straight into
//    the pool) gets fresh destination blocks now; one that looks up first
//    (kAfterLookup) gets them from AllocateKvLoad() once its answer is in.
//  - Until FinishKvLoad() the sequence is never admitted and its destination
//    blocks are never freed (an abort meanwhile ends the sequence, not the
//    blocks). FinishKvLoad(ok) registers the loaded blocks in the prefix cache
//    and frees them, so the normal admission finds them as a hit; a failed
//    load frees them uncached and the prompt is computed here.
//  - After a step, full blocks computed here are handed to connectors that
//    WantsComputedBlocks() (write-through spill); a request that ends (not
//    aborted) whose connector HoldsOnFinish() keeps its prompt's full blocks
//    pinned under its id until Scheduler::ReleaseKvHold().
//
// Every method is called by the Scheduler on the engine-loop thread, never
// concurrently; they must be cheap (record plain data for the connector's
// executor half, runtime/kv_connectors/kv_connector_worker.h, which moves the
// bytes). The connector must outlive the Scheduler's calls into it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/block_hash.h"
#include "scheduler/cache_waterfall.h"
#include "scheduler/kv_cache_manager.h"
#include "scheduler/request.h"
#include "scheduler/scheduler_metrics.h"

namespace tessera {

// One planned load, as plain data: blocks [first_block, first_block +
// hashes.size()) of sequence `seq`'s prompt. `blocks` are the destination
// blocks in the pool (kBeforeLoad: allocated at planning; kAfterLookup: empty
// until AllocateKvLoad).
struct KvLoadPlan {
  uint64_t id = 0;  // Scheduler-assigned; FinishKvLoad / AllocateKvLoad take it
  SeqId seq = 0;
  std::string request_id;
  int64_t first_block = 0;        // = leading blocks the pool already held (reused)
  std::vector<BlockHash> hashes;  // of each block to load
  std::vector<BlockId> blocks;
};

// Why an offer ended without a load.
enum class KvNoLoad {
  kIneligible,  // prefix caching off, or the sequence already holds blocks
  kAllCached,   // the pool already holds every block the source could supply
  kNoRoom,      // no free blocks for the destination now (kBeforeLoad)
  kEnded,       // the request ended before its offer was planned
};

class KvConnector {
 public:
  // When destination blocks are allocated: before the load starts (the data
  // plane writes into the pool while other requests run), or after a lookup
  // said how many blocks the source has.
  enum class Allocation { kBeforeLoad, kAfterLookup };

  virtual ~KvConnector() = default;
  virtual const char* name() const = 0;
  virtual Allocation allocation() const = 0;

  // Whether this connector may supply the prompt of `request`'s first choice.
  // Asked when the request arrives, and after each preemption of that choice
  // when OffersAgainAfterPreemption(). At most one connector loads a sequence
  // at a time; the first (in registration order) that accepts it is asked
  // first.
  virtual bool Offers(const Request& request) const = 0;
  virtual bool OffersAgainAfterPreemption() const { return false; }
  // The most leading prompt blocks this source can hold for `request`.
  virtual int64_t MaxBlocks(const Request& request) const = 0;

  // A load was planned: the sequence waits for FinishKvLoad(plan.id).
  virtual void OnLoadPlanned(const Request& request, const KvLoadPlan& plan) = 0;
  // An offer ended without a load; `cached_blocks`: leading blocks the pool
  // already held (kAllCached).
  virtual void OnNoLoad(const Request& /*request*/, KvNoLoad /*why*/, int64_t /*cached_blocks*/) {}
  // The load ended (FinishKvLoad); `loaded_blocks` were written and cached
  // when `ok`.
  virtual void OnLoadFinished(const KvLoadPlan& /*plan*/, int64_t /*loaded_blocks*/, bool /*ok*/) {}

  // Saving. Full blocks this step computed and registered in the prefix
  // cache (not loaded ones), with their hashes: their bytes are valid until
  // the next Schedule().
  virtual bool WantsComputedBlocks() const { return false; }
  virtual void OnBlocksComputed(const Request& /*request*/,
                                std::span<const std::pair<BlockId, BlockHash>> /*blocks*/) {}
  // Holding: a request that ends other than by abort keeps its blocks pinned
  // under its id (until Scheduler::ReleaseKvHold) when this returns true;
  // OnHeld then gets the prompt's full blocks and their hashes.
  virtual bool HoldsOnFinish(const Request& /*request*/) const { return false; }
  virtual void OnHeld(const std::string& /*request_id*/, std::span<const BlockId> /*blocks*/,
                      std::span<const BlockHash> /*hashes*/) {}

  // The cache waterfall (scheduler/cache_waterfall.h). Where the blocks this
  // connector loads come from, unless FinishKvLoad names each block's source.
  virtual CacheSource source() const { return CacheSource::kPeer; }
  // Why a prompt block the pool lacks and this source did not supply was not
  // found here; nullopt: no opinion. Asked on a sequence's first admission,
  // once per computed full block: must be cheap.
  virtual std::optional<ComputeReason> MissReason(const BlockHash& /*hash*/) const { return std::nullopt; }

  // Adds this connector's counters to the scheduler's (metrics snapshots).
  virtual void AddCounters(SchedulerCounters* /*counters*/) const {}
};

}  // namespace tessera
