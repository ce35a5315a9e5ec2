// KvRouter: the router's choice of instance per request (--routing-logic):
//   load        least loaded (InstanceRegistry::Pick; the default)
//   round-robin healthy instances in turn
//   kv-aware    lowest cost, in tokens of work: the prompt tokens the
//               instance would prefill (the prompt minus the leading blocks
//               the cluster index says it holds) + its pending work from this
//               router (prefill tokens + max_tokens of the requests sent to it
//               and not finished) + 256 x its waiting sequences + 256 x its KV
//               usage (0..1), the last two polled from its /metrics
//               + the tokens of cached blocks it would evict: the blocks the
//               request adds beyond the pool's free room (pool size from
//               /server_info, blocks held from the index), since a cached
//               prefix evicted is likely one to recompute later. Without it,
//               a burst on one holder copies every prefix to every instance,
//               and pools that hold them together but not each thrash.
// and, for kv-aware, peer fetch: when another instance holds more of the
// prompt's prefix than the chosen one (at least --kv-peer-fetch-min-tokens
// more) and both run a KV transfer agent (--role prefill|decode or
// --kv-peer-fetch), the holder is asked to export those blocks (the
// prefill->decode handshake, kv_transfer_params.do_remote_decode on the prefix)
// and the chosen instance pulls them instead of recomputing.
//
// The index (server/kv_events) is fed by each instance's KV events; the
// router learns an instance's event endpoints from its GET /server_info, so
// instances need only --kv-events-config. Prompt hashes are computed here with
// the instances' own function (scheduler/block_hash.h), their block size (from
// /server_info) and the request's cache_salt, over the token ids the router
// already gets from an instance's /tokenize: no tokenizer in the router.
//
// In flight: a prompt routed to an instance counts as held there while a
// request with it is in flight there (at most `routed_ttl` after the last
// dispatch) and for `routed_grace` after the last one ends (its BlockStored
// events come only once it is computed), so a burst of requests sharing a new
// prefix goes to one instance instead of each computing it. After that only
// the index counts: an instance that evicted the prefix no longer looks like
// it holds it (a belief refreshed by every dispatch would keep a prefix
// "held" on every instance it was ever sent to, and a full pool thrashes).
//
// Liveness: an instance the registry marks unhealthy (a failed call or poll)
// for drop_after is dropped from the index (so within about
// --router-poll-interval + 2.5 s of dying; unhealthy instances are never
// chosen meanwhile) and resubscribed (replay rebuilds
// it) when it answers again. Staleness: an instance that finished a request
// which should have stored new blocks, but sent no event batch since that
// request was dispatched, is stale after `stale_after`; a decision with a
// stale (or eventless) candidate is made on load alone (policy
// "load-fallback").
//
// Thread-safe; one maintenance thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "scheduler/block_hash.h"
#include "scheduler/routing_cost.h"
#include "server/kv_events/kv_event_subscriber.h"
#include "server/kv_events/kv_prefix_index.h"
#include "server/router/instance_registry.h"

namespace tessera {

struct KvRouterOptions {
  RoutingLogic logic = RoutingLogic::kLoad;
  std::chrono::milliseconds tick{200};          // maintenance: /server_info, subscriptions, drops
  std::chrono::milliseconds stale_after{3000};  // see the header comment
  int64_t peer_fetch_min_tokens = 64;           // 0: never fetch from a peer
  std::chrono::milliseconds routed_ttl{10000};   // see "In flight" above
  std::chrono::milliseconds routed_grace{1000};  // see "In flight" above
  // An instance unhealthy this long leaves the index (a shorter outage, e.g.
  // one failed poll under load, keeps its subscription and entries).
  std::chrono::milliseconds drop_after{1000};
  // The deployment's internal key ("" : none): the event subscriptions then
  // use the CURVE keys derived from it (server/kv_events/kv_event_auth.h).
  std::string internal_api_key;
};

struct RouteDecision {
  InstanceRole role = InstanceRole::kDecode;
  InstanceRef target;
  std::string policy;        // kv-aware | load | round-robin | load-fallback
  int64_t prompt_tokens = 0;
  int64_t hit_tokens = 0;    // prompt tokens the index says the target holds
  std::optional<InstanceRef> peer;  // kv-aware: fetch the prefix from here
  int64_t peer_tokens = 0;   // prompt tokens the peer holds
  // kv-aware: prompt tokens another candidate holds beyond what the target
  // holds or pulls from a peer — the cache waterfall's routed_elsewhere (the
  // router's own reason: the cost of load or staleness outweighed the hit).
  int64_t routed_elsewhere_tokens = 0;
  int64_t pending = 0;       // work added to the target's pending tokens until Done
  std::vector<BlockHash> routed_chain;  // kv-aware: the prompt's blocks counted in flight at the target until Done
  std::chrono::steady_clock::time_point dispatched;
};

class KvRouter {
 public:
  static StatusOr<std::unique_ptr<KvRouter>> Create(const KvRouterOptions& options, InstanceRegistry* registry);
  ~KvRouter();

  RoutingLogic logic() const { return options_.logic; }

  // An instance of `role` for `prompt` (token ids as the instances see them),
  // salted with `cache_salt` ("" : none), not in `exclude`. nullopt: none healthy.
  // `max_tokens` < 0: unknown (counted as 256 pending tokens). `peer_fetch`
  // false: never name a peer (a caller that does not call PeerExport). Every
  // decision must be followed by Done().
  std::optional<RouteDecision> Choose(InstanceRole role, std::span<const int32_t> prompt,
                                      const std::string& cache_salt, int64_t max_tokens,
                                      const std::vector<std::string>& exclude = {}, bool peer_fetch = true);

  // Peer fetch: asks decision.peer to export the prompt's first
  // decision.peer_tokens tokens (pinned until pulled) and returns the
  // kv_transfer_params to hand the target; null when it failed (the target
  // then computes the prompt; counted). `model`: the request's model field.
  nlohmann::ordered_json PeerExport(const RouteDecision& decision, std::span<const int32_t> prompt,
                                    const std::string& cache_salt, const nlohmann::ordered_json& model);

  // The request's call to the target ended (ok: completed).
  void Done(const RouteDecision& decision, bool ok);

  // Prometheus text: decisions, hit/prefill tokens, peer fetches, index size
  // and per-instance staleness.
  std::string SerializeMetrics() const;

 private:
  struct Info {  // what /server_info said, and the subscription
    bool known = false;            // /server_info answered with a block size
    int32_t block_size = 0;
    PrefixHashAlgo hash_algo = PrefixHashAlgo::kSha256;  // its --prefix-caching-hash-algo
    int64_t num_blocks = 0;        // its KV pool; 0: not said (no eviction term)
    std::string events_endpoint, replay_endpoint;  // "" : no events
    bool has_kv_transfer = false;
    bool subscribed = false;
    std::optional<std::chrono::steady_clock::time_point> unhealthy_since;
    // Staleness: a request dispatched at owed_since finished and should have stored blocks.
    std::optional<std::chrono::steady_clock::time_point> owed_since;
    std::chrono::steady_clock::time_point owed_done;
  };
  struct Counters {
    std::map<std::tuple<std::string, std::string, std::string>, int64_t> decisions;  // (instance, policy, role)
    std::map<std::string, int64_t> hit_tokens, prefill_tokens;                      // by role
    std::map<std::string, int64_t> routed_elsewhere_tokens;                         // by role
    std::map<std::string, int64_t> peer_fetches;  // outcome -> count
    int64_t peer_fetch_tokens = 0;
    // Per-decision hit ratio histogram (hit / prompt tokens), le buckets.
    std::vector<int64_t> ratio_buckets = std::vector<int64_t>(6, 0);
    double ratio_sum = 0;
    int64_t ratio_count = 0;
  };

  KvRouter() = default;
  void Tick();
  void Loop();
  bool Stale(const Info& info, const kv_events::InstanceMatch* match,
             std::chrono::steady_clock::time_point now) const;
  void Count(const RouteDecision& d);

  KvRouterOptions options_;
  InstanceRegistry* registry_ = nullptr;
  std::unique_ptr<kv_events::KvPrefixIndex> index_;
  std::unique_ptr<kv_events::KvEventSubscriber> subscriber_;
  std::atomic<uint64_t> rr_next_{0};

  mutable std::mutex mu_;
  std::map<std::string, Info> infos_;  // by address; guarded by mu_
  std::map<std::string, int64_t> pending_;  // address -> tokens of work in flight; guarded by mu_
  struct Routed {
    int32_t in_flight = 0;                        // requests with this block dispatched there, not Done
    std::chrono::steady_clock::time_point last;  // last dispatch or Done
  };
  // No longer counts as held (see "In flight" above).
  bool Expired(const Routed& r, std::chrono::steady_clock::time_point now) const {
    return now - r.last > (r.in_flight > 0 ? options_.routed_ttl : options_.routed_grace);
  }
  // Chain hash -> instance -> requests in flight with that block; guarded by mu_.
  std::unordered_map<BlockHash, std::map<std::string, Routed>, BlockHashHasher> routed_;
  Counters counters_;                  // guarded by mu_
  bool stop_ = false;                  // guarded by mu_
  std::thread thread_;
};

}  // namespace tessera
