// The twin's multi-instance and PD layouts (docs/architecture.md, "Twin"):
// several twin instances — each its own real Scheduler and KvCacheManager —
// behind the router's policy, on one virtual clock.
//
// Discrete events: a request is routed at its arrival time (the router's
// decision sees every instance's state at that moment: the polled figures are
// read live, KV events arrive at once) and joins the chosen instance's inbox;
// of the instances with work, the one whose next step starts first steps next
// (ties: arrivals first, then the lower instance), each in EngineLoop::Step's
// order (twin_instance.h). So a 1-instance cluster is RunTwin, step for step.
//
// Routing: `--routing-logic` with the router's own formulas
// (scheduler/routing_cost.h): load (outstanding tokens + 256 x queued
// sequences), round-robin, kv-aware (prompt tokens to prefill given the
// leading blocks the instance's prefix cache holds — read from its
// KvCacheManager instead of KV events — + the router's pending work there +
// 256 x waiting + 256 x KV usage + evicted tokens; a prompt routed there counts
// as held while in flight and for `routed_grace_ms` after, as the router's).
//
// PD: a prompt of at least `prefill_threshold` tokens is prefilled on a
// prefill instance as serving runs it (max_tokens 1, its prompt's full blocks
// held for the decode on finish); when it ends the router sends the request
// to a decode instance, whose Scheduler pulls the held blocks through its KV
// connector seam (a sim connector standing in for the transfer connector:
// kBeforeLoad, one pull at a time per decode instance, each taking
// latency + bytes / bandwidth of virtual time), computes the last prompt
// block and decodes. The client's tokens all come from the decode instance,
// as in serving (the prefill's one token is not relayed). Shorter prompts go
// to the decode pool directly, as the router sends them; so does a request a
// prefill instance refused (429), without the router's retry on another.
// Held blocks count in the prefill's pool until released: a prefill whose
// pool is full of holds waits for the decodes' pulls.
//
// Not modelled: the router's poll interval and KV-event delay (both read
// live), staleness fallback, peer fetch, failures and migration, the
// transfer's pin timeout. Single-threaded; no wall clock is read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/sim/twin.h"
#include "scheduler/routing_cost.h"

namespace tessera::sim {

enum class ClusterLayout { kUnified, kPd };

// The PD layout's KV transfer: a pull of `bytes` takes latency + bytes /
// bandwidth. Defaults: UCX tcp,self between two processes on this project's
// CPU machine (bench/RESULTS.md, "KV transfer between two instances": the
// line through its best 1k- and 4k-token rows).
struct KvTransferModel {
  double bandwidth_gb_s = 0.59;  // 1e9 bytes per second
  double latency_ms = 24;
  // KV bytes per token of the model in the pool's dtype (ModelConfig::
  // KvBytesPerToken); must be > 0 for PD.
  int64_t kv_bytes_per_token = 0;
  int64_t PullNs(int64_t bytes) const;
};

struct ClusterOptions {
  ClusterLayout layout = ClusterLayout::kUnified;
  int32_t instances = 1;          // unified: instances behind the router
  int32_t prefill_instances = 1;  // pd
  int32_t decode_instances = 1;   // pd
  TwinOptions unified;            // each unified instance (its cost model too)
  TwinOptions prefill;            // pd: each prefill instance
  TwinOptions decode;             // pd: each decode instance
  RoutingLogic routing_logic = RoutingLogic::kLoad;  // for both pools, as the router's
  int64_t prefill_threshold = 128;  // pd: shorter prompts skip the prefill pool (--prefill-threshold)
  double routed_grace_ms = 1000;    // kv-aware: see the header comment (KvRouterOptions::routed_grace)
  KvTransferModel transfer;
};

// Where a request went and what moved for it.
struct ClusterRoute {
  int32_t instance = -1;          // the unified or decode instance that made its tokens
  int32_t prefill_instance = -1;  // pd: the prefill instance (-1: prefill skipped or refused)
  int64_t hit_tokens = 0;         // kv-aware: prompt tokens the chosen instance held at the decision
  int64_t transfer_bytes = 0;     // pd: pulled KV bytes (0: none)
  int64_t transfer_start_ns = -1;  // pd: when its pull started and ended (-1: no pull)
  int64_t transfer_end_ns = -1;
};

struct ClusterInstanceStats {
  std::string role;  // "unified", "prefill" or "decode"
  int32_t index = 0;
  int64_t requests = 0;  // routed here
  int64_t pulls = 0;     // decode: KV pulls it ran
  TwinStats stats;
};

struct ClusterStats {
  int64_t end_ns = 0;  // the virtual time when the last request ended
  int64_t transfers = 0;
  int64_t transfer_bytes = 0;
  int64_t preemptions = 0;       // summed over instances
  int64_t router_hit_tokens = 0;  // sum of ClusterRoute::hit_tokens
};

struct ClusterResult {
  std::vector<TwinRequestResult> requests;  // trace order; tokens as the client receives them
  std::vector<ClusterRoute> routes;         // trace order
  std::vector<ClusterInstanceStats> instances;  // unified; or prefill instances, then decode
  ClusterStats stats;
};

// Runs `requests` (sorted by arrival) through the layout to completion.
// INVALID_ARGUMENT for counts < 1, a PD layout without kv_bytes_per_token or
// bandwidth, what RunTwin refuses; INTERNAL if no instance can make progress.
StatusOr<ClusterResult> RunCluster(const ClusterOptions& options, const std::vector<TwinRequest>& requests);

}  // namespace tessera::sim
