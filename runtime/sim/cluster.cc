#include "runtime/sim/cluster.h"

#include <algorithm>
#include <map>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>

#include "runtime/sim/sim_transfer.h"
#include "runtime/sim/twin_instance.h"
#include "scheduler/block_hash.h"

namespace tessera::sim {
namespace {

// A prompt routed to an instance counts as held there while in flight, at
// most this long after its last dispatch (KvRouterOptions::routed_ttl).
constexpr int64_t kRoutedTtlNs = 10'000'000'000;

struct Node {
  std::string role;
  int32_t index = 0;  // within its pool
  std::unique_ptr<SimTransferConnector> transfer;  // pd only
  std::unique_ptr<TwinInstance> twin;
  int64_t outstanding = 0;  // the registry's: tokens of calls in flight here
  int64_t requests = 0;
};

// One call the router made to an instance, until it ends.
struct Leg {
  Node* node = nullptr;
  int64_t outstanding = 0;  // added to node->outstanding
  int64_t pending = 0;      // kv-aware: added to the router's pending work there
  std::vector<BlockHash> routed_chain;
  int64_t hit_tokens = 0;
};

// The router's state and choice (server/router/kv_router.cc, with its
// arithmetic from scheduler/routing_cost.h): what it would know is read from
// the instances directly, at the decision's virtual time.
class Router {
 public:
  Router(RoutingLogic logic, double grace_ms)
      : logic_(logic), grace_ns_(static_cast<int64_t>(grace_ms * 1e6)) {}

  // Chooses among `pool` for a call of `prompt` whose decode work is
  // `max_tokens` (-1: unknown), and records it in flight.
  Leg Choose(const std::vector<Node*>& pool, std::span<const int32_t> prompt, int64_t max_tokens, int64_t now) {
    Leg leg;
    const int64_t prompt_tokens = static_cast<int64_t>(prompt.size());
    if (logic_ == RoutingLogic::kRoundRobin) {
      leg.node = pool[rr_next_++ % pool.size()];  // one turn counter for both pools, as the router's
      return leg;
    }
    if (logic_ == RoutingLogic::kLoad) {
      int64_t best = 0;
      for (Node* n : pool) {
        const int64_t load = LoadScore(n->outstanding, n->twin->unfinished());
        if (leg.node == nullptr || load < best) {
          leg.node = n;
          best = load;
        }
      }
      return leg;
    }
    // kv-aware. Every instance of a pool shares its block size and hash scheme.
    const KvCacheManager& kv0 = pool.front()->twin->scheduler().kv_cache();
    std::vector<BlockHash> chain;
    kv0.hash_scheme().ExtendBlockHashes(prompt, kv0.block_size(), {}, "", &chain);
    const int64_t decode_work = RoutingDecodeWork(max_tokens);
    double best_cost = 0;
    for (Node* n : pool) {
      const Scheduler& s = n->twin->scheduler();
      const KvCacheManager& kv = s.kv_cache();
      const int64_t held = static_cast<int64_t>(kv.FindCachedPrefix(chain, prompt_tokens).blocks.size());
      const int64_t usable = UsableHitBlocks(prompt_tokens, kv.block_size());
      KvAwareCandidate c;
      c.hit_tokens = std::min(std::max(held, RoutedBlocks(chain, n, now)), usable) * kv.block_size();
      c.pending_tokens = pending_[n];
      c.waiting = s.num_waiting();
      c.kv_usage = kv.Usage();
      c.pool_known = true;
      c.held_blocks = kv.pool().num_cached_blocks();
      c.num_blocks = kv.num_blocks();
      c.block_size = kv.block_size();
      const double cost = KvAwareCost(c, prompt_tokens, decode_work);
      if (leg.node == nullptr || KvAwareBetter(cost, c.hit_tokens, best_cost, leg.hit_tokens)) {
        leg.node = n;
        best_cost = cost;
        leg.hit_tokens = c.hit_tokens;
      }
    }
    leg.pending = prompt_tokens - leg.hit_tokens + decode_work;
    pending_[leg.node] += leg.pending;
    for (const BlockHash& h : chain) {
      Routed& r = routed_[h][leg.node];
      ++r.in_flight;
      r.last_ns = now;
    }
    leg.routed_chain = std::move(chain);
    return leg;
  }

  void Done(const Leg& leg, int64_t now) {
    if (logic_ != RoutingLogic::kKvAware) return;
    pending_[leg.node] -= leg.pending;
    for (const BlockHash& h : leg.routed_chain) {
      Routed& r = routed_[h][leg.node];
      r.in_flight = std::max(0, r.in_flight - 1);
      r.last_ns = now;
    }
  }

 private:
  struct Routed {
    int32_t in_flight = 0;
    int64_t last_ns = 0;
  };
  // Leading blocks of `chain` in flight at `n`, or within the grace after.
  int64_t RoutedBlocks(const std::vector<BlockHash>& chain, Node* n, int64_t now) const {
    int64_t count = 0;
    for (const BlockHash& h : chain) {
      auto it = routed_.find(h);
      if (it == routed_.end()) break;
      auto at = it->second.find(n);
      if (at == it->second.end()) break;
      if (now - at->second.last_ns > (at->second.in_flight > 0 ? kRoutedTtlNs : grace_ns_)) break;
      ++count;
    }
    return count;
  }

  RoutingLogic logic_;
  int64_t grace_ns_;
  uint64_t rr_next_ = 0;
  std::map<Node*, int64_t> pending_;
  std::unordered_map<BlockHash, std::map<Node*, Routed>, BlockHashHasher> routed_;
};

Status CheckClusterOptions(const ClusterOptions& o) {
  if (o.layout == ClusterLayout::kUnified) {
    if (o.instances < 1) return InvalidArgument("cluster: --instances must be at least 1");
    return Status::Ok();
  }
  if (o.prefill_instances < 1 || o.decode_instances < 1) {
    return InvalidArgument("cluster: --prefill-instances and --decode-instances must be at least 1");
  }
  if (o.transfer.kv_bytes_per_token <= 0) {
    return InvalidArgument("cluster: PD needs the model's KV bytes per token (its config) for the transfer time");
  }
  if (!(o.transfer.bandwidth_gb_s > 0) || !(o.transfer.latency_ms >= 0)) {
    return InvalidArgument("cluster: the KV transfer bandwidth must be > 0 and its latency >= 0");
  }
  if (o.prefill.scheduler.kv.block_size != o.decode.scheduler.kv.block_size) {
    return InvalidArgument("cluster: prefill and decode instances need the same --block-size (blocks move as they are)");
  }
  return Status::Ok();
}

class Cluster {
 public:
  explicit Cluster(const ClusterOptions& o) : o_(o), router_(o.routing_logic, o.routed_grace_ms) {}

  Status Build() {
    auto add = [&](const char* role, int32_t count, const TwinOptions& to, std::vector<Node*>* pool) -> Status {
      for (int32_t i = 0; i < count; ++i) {
        auto n = std::make_unique<Node>();
        n->role = role;
        n->index = i;
        if (o_.layout == ClusterLayout::kPd) {
          n->transfer = std::make_unique<SimTransferConnector>(
              o_.transfer, to.scheduler.kv.block_size,
              [this](int32_t source, const std::string& handle, int64_t at) {
                prefill_[static_cast<size_t>(source)]->transfer->ReleaseAt(handle, at);
              });
        }
        ASSIGN_OR_RETURN(n->twin, TwinInstance::Create(to, n->transfer.get(), n->transfer.get()));
        pool->push_back(n.get());
        nodes_.push_back(std::move(n));
      }
      return Status::Ok();
    };
    if (o_.layout == ClusterLayout::kUnified) return add("unified", o_.instances, o_.unified, &decode_);
    RETURN_IF_ERROR(add("prefill", o_.prefill_instances, o_.prefill, &prefill_));
    return add("decode", o_.decode_instances, o_.decode, &decode_);
  }

  Status Run(const std::vector<TwinRequest>& requests) {
    requests_ = &requests;
    result_.requests.resize(requests.size());
    result_.routes.resize(requests.size());
    prefill_results_.resize(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      if (!index_.emplace(requests[i].id, i).second) {
        return InvalidArgument("cluster: request id '" + requests[i].id + "' repeats");
      }
    }
    size_t next = 0;
    for (;;) {
      // The next event in time; at one time: step ends, then arrivals, then step begins.
      Node* best = nullptr;
      int64_t best_t = kNever;
      int best_rank = 3;
      for (auto& n : nodes_) {
        const int64_t t = n->twin->NextEventNs();
        const int rank = n->twin->step_in_flight() ? 0 : 2;
        if (t != kNever && (t < best_t || (t == best_t && rank < best_rank))) {
          best = n.get();
          best_t = t;
          best_rank = rank;
        }
      }
      if (next < requests.size() &&
          (best == nullptr || requests[next].arrival_ns < best_t || (requests[next].arrival_ns == best_t && best_rank > 1))) {
        Arrive(next++);
        continue;
      }
      if (best == nullptr) break;
      RETURN_IF_ERROR(best->twin->Advance());
      for (const std::string& id : best->twin->TakeEnded()) Ended(best, id);
    }
    for (auto& n : nodes_) {
      if (!n->twin->Idle()) return Internal("cluster: " + n->role + " instance " + std::to_string(n->index) +
                                            " stopped with requests unfinished");
    }
    return Status::Ok();
  }

  ClusterResult Take() {
    ClusterStats& st = result_.stats;
    for (auto& n : nodes_) {
      ClusterInstanceStats s;
      s.role = n->role;
      s.index = n->index;
      s.requests = n->requests;
      s.stats = n->twin->stats();
      if (n->transfer) {
        s.pulls = static_cast<int64_t>(n->transfer->pulls().size());
        for (const SimTransferConnector::Pull& p : n->transfer->pulls()) {
          ++st.transfers;
          st.transfer_bytes += p.bytes;
          ClusterRoute& r = result_.routes[index_.at(p.request_id)];
          r.transfer_bytes = p.bytes;
          r.transfer_start_ns = p.start_ns;
          r.transfer_end_ns = p.end_ns;
        }
      }
      st.preemptions += s.stats.counters.preemptions;
      if (n->role != "prefill") st.end_ns = std::max(st.end_ns, s.stats.end_ns);
      result_.instances.push_back(std::move(s));
    }
    for (const ClusterRoute& r : result_.routes) st.router_hit_tokens += r.hit_tokens;
    return std::move(result_);
  }

 private:
  // The router receives request i at its arrival.
  void Arrive(size_t i) {
    const TwinRequest& t = (*requests_)[i];
    const bool prefill = o_.layout == ClusterLayout::kPd &&
                         static_cast<int64_t>(t.prompt_token_ids.size()) >= o_.prefill_threshold;
    if (!prefill) {
      Decode(i, t.arrival_ns, std::nullopt);
      return;
    }
    // The prefill role runs it with max_tokens 1 and holds its blocks for the decode.
    Leg leg = router_.Choose(prefill_, t.prompt_token_ids, 1, t.arrival_ns);
    leg.outstanding = static_cast<int64_t>(t.prompt_token_ids.size());
    TwinSubmission sub;
    sub.request = t;
    sub.request.max_tokens = 1;
    sub.at_ns = t.arrival_ns;
    sub.result = &prefill_results_[i];
    sub.export_kv = true;
    Send(std::move(leg), std::move(sub));
    result_.routes[i].prefill_instance = legs_[t.id].node->index;
    result_.routes[i].hit_tokens = legs_[t.id].hit_tokens;
  }

  // The decode (or unified) call of request i at `now`, pulling from `source` if any.
  void Decode(size_t i, int64_t now, std::optional<RemoteKvSource> source) {
    const TwinRequest& t = (*requests_)[i];
    Leg leg = router_.Choose(decode_, t.prompt_token_ids, t.max_tokens, now);
    leg.outstanding = static_cast<int64_t>(t.prompt_token_ids.size()) + t.max_tokens;
    ClusterRoute& route = result_.routes[i];
    route.instance = leg.node->index;
    if (route.prefill_instance < 0) route.hit_tokens = leg.hit_tokens;
    TwinSubmission sub;
    sub.request = t;
    sub.at_ns = now;
    sub.result = &result_.requests[i];
    sub.remote_kv = std::move(source);
    Send(std::move(leg), std::move(sub));
  }

  void Send(Leg leg, TwinSubmission sub) {
    leg.node->outstanding += leg.outstanding;
    ++leg.node->requests;
    Node* node = leg.node;
    legs_[sub.request.id] = std::move(leg);
    node->twin->Submit(std::move(sub));
  }

  // Request `id` ended on `node` (finished or refused) at the node's time.
  void Ended(Node* node, const std::string& id) {
    const int64_t now = node->twin->now_ns();
    auto it = legs_.find(id);
    if (it == legs_.end()) return;
    const Leg leg = std::move(it->second);
    legs_.erase(it);
    leg.node->outstanding -= leg.outstanding;
    router_.Done(leg, now);
    if (node->role != "prefill") return;
    const size_t i = index_.at(id);
    std::optional<RemoteKvSource> source;
    const int64_t held = node->transfer->TakeHeldBlocks(id);
    if (prefill_results_[i].ok && held > 0) {
      source.emplace();
      source->port = node->index;  // the prefill instance, for its release
      source->handle = id;
      source->block_ids.assign(static_cast<size_t>(held), 0);
    } else {
      result_.routes[i].prefill_instance = -1;  // refused there: the decode computes the prompt
    }
    Decode(i, now, std::move(source));
  }

  const ClusterOptions& o_;
  Router router_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Node*> prefill_, decode_;
  const std::vector<TwinRequest>* requests_ = nullptr;
  std::vector<TwinRequestResult> prefill_results_;  // the prefill calls' own outputs (not the client's)
  std::unordered_map<std::string, Leg> legs_;       // calls in flight, by request id
  std::unordered_map<std::string, size_t> index_;   // request id -> trace index
  ClusterResult result_;
};

}  // namespace

StatusOr<ClusterResult> RunCluster(const ClusterOptions& options, const std::vector<TwinRequest>& requests) {
  RETURN_IF_ERROR(CheckClusterOptions(options));
  RETURN_IF_ERROR(CheckArrivalOrder(requests));
  Cluster cluster(options);
  RETURN_IF_ERROR(cluster.Build());
  RETURN_IF_ERROR(cluster.Run(requests));
  return cluster.Take();
}

}  // namespace tessera::sim
