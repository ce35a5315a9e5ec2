#include "server/router/kv_router.h"
#include "common/log.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "scheduler/block_hash.h"
#include "server/router/http_client.h"

namespace tessera {
namespace {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr double kRatioBounds[] = {0.0, 0.25, 0.5, 0.75, 0.9, 1.0};

// An endpoint an instance bound on a wildcard host, as reachable from here:
// tcp://*:N, tcp://0.0.0.0:N and tcp://[::]:N become tcp://HOST:N.
std::string Reachable(const std::string& endpoint, const std::string& host) {
  if (endpoint.rfind("tcp://", 0) != 0) return endpoint;  // ipc:// etc.: same host only
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon < 6) return endpoint;
  const std::string h = endpoint.substr(6, colon - 6);
  if (h != "*" && h != "0.0.0.0" && h != "[::]" && h != "::" && h != "[*]") return endpoint;
  const std::string hh = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return "tcp://" + hh + endpoint.substr(colon);
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<KvRouter>> KvRouter::Create(const KvRouterOptions& options, InstanceRegistry* registry) {
  auto r = std::unique_ptr<KvRouter>(new KvRouter());
  r->options_ = options;
  r->registry_ = registry;
  if (options.logic != RoutingLogic::kKvAware) return r;
  r->index_ = std::make_unique<kv_events::KvPrefixIndex>();
  kv_events::KvEventSubscriberOptions so;  // topic "": one SUB socket per instance, everything it sends
  if (!options.internal_api_key.empty()) so.curve = kv_events::KvEventCurveKeys::FromInternalKey(options.internal_api_key);
  ASSIGN_OR_RETURN(r->subscriber_, kv_events::KvEventSubscriber::Start(so, r->index_.get()));
  r->thread_ = std::thread([p = r.get()] { p->Loop(); });
  return r;
}

KvRouter::~KvRouter() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
  subscriber_.reset();  // before the index it feeds
}

void KvRouter::Loop() {
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stop_) return;
    }
    Tick();
    std::this_thread::sleep_for(options_.tick);
  }
}

// Follows the registry: learns new instances' /server_info and subscribes,
// drops unhealthy or removed ones from the index, settles owed events.
void KvRouter::Tick() {
  const std::vector<InstanceSnapshot> snaps = registry_->Snapshot();
  std::map<std::string, InstanceSnapshot> by_address;  // an address in two roles is one instance
  for (const InstanceSnapshot& s : snaps) {
    auto [it, fresh] = by_address.emplace(s.ref.address, s);
    if (!fresh) it->second.healthy = it->second.healthy && s.healthy;
  }
  std::vector<std::string> to_remove;
  std::vector<InstanceRef> to_learn;
  {
    std::lock_guard lock(mu_);
    for (auto it = infos_.begin(); it != infos_.end();) {
      if (by_address.count(it->first) == 0) {
        if (it->second.subscribed) to_remove.push_back(it->first);
        it = infos_.erase(it);
      } else {
        ++it;
      }
    }
    for (const auto& [address, s] : by_address) {
      Info& info = infos_[address];
      if (!s.healthy) {
        const auto now = Clock::now();
        if (!info.unhealthy_since) info.unhealthy_since = now;
        if (now - *info.unhealthy_since < options_.drop_after) continue;
        if (info.subscribed) {
          to_remove.push_back(address);
          LogInfo("router: kv-aware: {} is down; dropped from the prefix index", address);
        }
        info = Info();  // relearn /server_info when it is back (a restart may move its endpoints)
        info.unhealthy_since = now - options_.drop_after;
        continue;
      }
      info.unhealthy_since.reset();
      if (!info.known) to_learn.push_back(s.ref);
    }
  }
  for (const std::string& a : to_remove) subscriber_->RemoveSource(a);

  for (const InstanceRef& ref : to_learn) {
    HttpCallOptions o = registry_->CallOptions();
    o.connect_timeout = std::chrono::milliseconds(500);
    o.idle_timeout = std::chrono::milliseconds(1000);
    HttpCallResult r;
    if (!HttpCall(ref.host, ref.port, "GET", "/server_info", "", o, &r).ok() || r.status != 200) continue;
    const Json j = Json::parse(r.body, nullptr, false);
    if (!j.is_object() || !j.contains("block_size") || !j["block_size"].is_number_integer()) continue;  // loading
    Info fresh;
    fresh.known = true;
    fresh.block_size = j["block_size"].get<int32_t>();
    if (fresh.block_size <= 0) continue;
    // vLLM's instances do not say; sha256 is its default as ours.
    if (auto algo = j.find("prefix_caching_hash_algo"); algo != j.end() && algo->is_string()) {
      auto parsed = ParsePrefixHashAlgo(algo->get<std::string>());
      if (!parsed.ok()) {
        LogWarn("router: kv-aware: {}: {} (load-only for it)", ref.address, parsed.status().message());
        continue;
      }
      fresh.hash_algo = *parsed;
    }
    if (auto nb = j.find("num_kv_blocks"); nb != j.end() && nb->is_number_integer()) {
      fresh.num_blocks = std::max<int64_t>(0, nb->get<int64_t>());
    }
    if (auto ev = j.find("kv_events"); ev != j.end() && ev->is_object() && ev->value("endpoint", "") != "") {
      fresh.events_endpoint = Reachable(ev->value("endpoint", ""), ref.host);
      fresh.replay_endpoint = Reachable(ev->value("replay_endpoint", ""), ref.host);
    }
    fresh.has_kv_transfer = j.contains("kv_transfer") && j["kv_transfer"].is_object();
    if (!fresh.events_endpoint.empty()) {
      subscriber_->AddSource({ref.address, fresh.events_endpoint, fresh.replay_endpoint});
      fresh.subscribed = true;
    }
    LogInfo("router: kv-aware: {}: block size {}, hash {}, KV events {}{}, KV transfer {}", ref.address,
            fresh.block_size, PrefixHashAlgoName(fresh.hash_algo),
            fresh.events_endpoint.empty() ? "none (load-only for it)" : fresh.events_endpoint,
            fresh.replay_endpoint.empty() ? "" : " (replay " + fresh.replay_endpoint + ")",
            fresh.has_kv_transfer ? "yes" : "no");
    std::lock_guard lock(mu_);
    if (auto it = infos_.find(ref.address); it != infos_.end() && !it->second.known) it->second = fresh;
  }

  const auto now = Clock::now();
  {
    std::lock_guard lock(mu_);
    for (auto it = routed_.begin(); it != routed_.end();) {
      std::erase_if(it->second, [&](const auto& e) { return Expired(e.second, now); });
      it = it->second.empty() ? routed_.erase(it) : std::next(it);
    }
  }
  // Events owed and since received: settled.
  const std::vector<kv_events::InstanceMatch> all = index_->Match(std::span<const kv_events::HashKey>());
  std::lock_guard lock(mu_);
  for (const kv_events::InstanceMatch& m : all) {
    auto it = infos_.find(m.instance);
    if (it == infos_.end() || !it->second.owed_since) continue;
    const auto last = now - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(m.last_event_age_s));
    if (last >= *it->second.owed_since) it->second.owed_since.reset();
  }
}

bool KvRouter::Stale(const Info& info, const kv_events::InstanceMatch* match, Clock::time_point now) const {
  if (!info.known || !info.subscribed || match == nullptr) return true;
  if (!info.owed_since) return false;
  const auto last = now - std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(match->last_event_age_s));
  return last < *info.owed_since && now - info.owed_done > options_.stale_after;
}

std::optional<RouteDecision> KvRouter::Choose(InstanceRole role, std::span<const int32_t> prompt,
                                              const std::string& cache_salt, int64_t max_tokens,
                                              const std::vector<std::string>& exclude, bool peer_fetch) {
  std::vector<InstanceSnapshot> cands;
  for (const InstanceSnapshot& s : registry_->Snapshot()) {
    if (s.role != role || !s.healthy) continue;
    if (std::find(exclude.begin(), exclude.end(), s.ref.address) != exclude.end()) continue;
    cands.push_back(s);
  }
  if (cands.empty()) return std::nullopt;
  RouteDecision d;
  d.role = role;
  d.prompt_tokens = static_cast<int64_t>(prompt.size());
  d.dispatched = Clock::now();
  auto by_load = [&](const char* policy) -> std::optional<RouteDecision> {
    std::optional<InstanceRef> p = registry_->Pick(role, exclude);
    if (!p) return std::nullopt;
    d.target = *p;
    d.policy = policy;
    return d;
  };

  if (options_.logic == RoutingLogic::kLoad) {
    auto out = by_load("load");
    if (out) Count(*out);
    return out;
  }
  if (options_.logic == RoutingLogic::kRoundRobin) {
    std::sort(cands.begin(), cands.end(), [](auto& a, auto& b) { return a.ref.address < b.ref.address; });
    d.target = cands[rr_next_.fetch_add(1) % cands.size()].ref;
    d.policy = "round-robin";
    Count(d);
    return d;
  }

  // kv-aware: every candidate's hit from the index, one chain per block size.
  std::map<std::string, Info> infos;
  std::map<std::string, int64_t> pending;
  {
    std::lock_guard lock(mu_);
    infos = infos_;
    pending = pending_;
  }
  // The prompt's chain as an instance hashes it: its block size and
  // --prefix-caching-hash-algo (both from its /server_info).
  using Scheme = std::pair<int32_t, PrefixHashAlgo>;
  std::map<Scheme, std::vector<BlockHash>> chains;
  auto chain = [&](const Info& info) -> const std::vector<BlockHash>& {
    const Scheme key{info.block_size, info.hash_algo};
    auto it = chains.find(key);
    if (it == chains.end()) {
      std::vector<BlockHash> hashes;
      BlockHashScheme(info.hash_algo).ExtendBlockHashes(prompt, info.block_size, {}, cache_salt, &hashes);
      it = chains.emplace(key, std::move(hashes)).first;
    }
    return it->second;
  };
  // Leading blocks in flight at `address` (see "In flight" in the header).
  auto routed_blocks = [&](const std::string& address, const Info& info) -> int64_t {
    const std::vector<BlockHash>& hashes = chain(info);
    const auto t = Clock::now();
    std::lock_guard lock(mu_);
    int64_t n = 0;
    for (const BlockHash& h : hashes) {
      auto it = routed_.find(h);
      if (it == routed_.end()) break;
      auto at = it->second.find(address);
      if (at == it->second.end() || Expired(at->second, t)) break;
      ++n;
    }
    return n;
  };
  const int64_t decode_work = RoutingDecodeWork(max_tokens);
  const auto now = Clock::now();
  std::map<Scheme, std::vector<kv_events::InstanceMatch>> matches;  // chain -> index answer
  auto hit_blocks = [&](const std::string& address, const Info& info, const kv_events::InstanceMatch** out,
                        bool with_routed = true) -> int64_t {
    const Scheme key{info.block_size, info.hash_algo};
    auto it = matches.find(key);
    if (it == matches.end()) it = matches.emplace(key, index_->Match(std::span<const BlockHash>(chain(info)))).first;
    const int64_t usable = UsableHitBlocks(d.prompt_tokens, info.block_size);
    if (out) *out = nullptr;
    int64_t held = 0;
    for (const kv_events::InstanceMatch& m : it->second) {
      if (m.instance != address) continue;
      if (out) *out = &m;
      held = m.matched_blocks;
    }
    return std::min(with_routed ? std::max(held, routed_blocks(address, info)) : held, usable);
  };

  bool fallback = false;
  std::string why;  // debug log: every candidate's terms
  double best_cost = 0;
  const InstanceSnapshot* best = nullptr;
  int64_t best_hit = 0;
  int64_t max_hit = 0;  // any candidate's
  for (const InstanceSnapshot& s : cands) {
    const Info& info = infos[s.ref.address];
    const kv_events::InstanceMatch* m = nullptr;
    const int64_t hit = info.known ? hit_blocks(s.ref.address, info, &m) * info.block_size : 0;
    if (Stale(info, m, now)) {
      fallback = true;
      break;
    }
    KvAwareCandidate c;
    c.hit_tokens = hit;
    c.pending_tokens = pending[s.ref.address];
    c.waiting = s.waiting;
    c.kv_usage = s.kv_usage;
    c.pool_known = m != nullptr;  // the eviction term needs the index's count of its blocks
    c.held_blocks = m != nullptr ? m->held_blocks : 0;
    c.num_blocks = info.num_blocks;
    c.block_size = info.block_size;
    const double cost = KvAwareCost(c, d.prompt_tokens, decode_work);
    if (LogEnabled(LogLevel::kDebug)) {
      why += fmt::format(" {}[hit {} pending {} waiting {} kv {:.2f} evict {} cost {:.0f}]", s.ref.address, hit,
                         c.pending_tokens, s.waiting, s.kv_usage, KvAwareEvictTokens(c, d.prompt_tokens, decode_work),
                         cost);
    }
    max_hit = std::max(max_hit, hit);
    if (best == nullptr || KvAwareBetter(cost, hit, best_cost, best_hit)) {
      best = &s;
      best_cost = cost;
      best_hit = hit;
    }
  }
  if (fallback || best == nullptr) {
    auto out = by_load("load-fallback");
    if (out) {
      const Info& info = infos[out->target.address];
      if (info.known && info.subscribed) {
        out->hit_tokens = hit_blocks(out->target.address, info, nullptr) * info.block_size;
      }
      Count(*out);
    }
    return out;
  }
  d.target = best->ref;
  d.policy = "kv-aware";
  d.hit_tokens = best_hit;

  // Peer fetch: a healthy instance (any role) holding more of the prefix.
  const Info& tinfo = infos[d.target.address];
  if (peer_fetch && options_.peer_fetch_min_tokens > 0 && tinfo.has_kv_transfer) {
    std::set<std::string> seen;
    for (const InstanceSnapshot& s : registry_->Snapshot()) {
      if (!s.healthy || s.ref.address == d.target.address || !seen.insert(s.ref.address).second) continue;
      const Info& info = infos[s.ref.address];
      if (!info.known || !info.has_kv_transfer || info.block_size != tinfo.block_size ||
          info.hash_algo != tinfo.hash_algo) {
        continue;
      }
      const kv_events::InstanceMatch* m = nullptr;
      // Computed blocks only (the index), not prompts still in flight there.
      const int64_t hit = hit_blocks(s.ref.address, info, &m, false) * info.block_size;
      if (Stale(info, m, now)) continue;
      if (hit - d.hit_tokens >= options_.peer_fetch_min_tokens && hit > d.peer_tokens) {
        d.peer = s.ref;
        d.peer_tokens = hit;
      }
    }
  }
  d.routed_elsewhere_tokens = std::max<int64_t>(0, max_hit - std::max(d.hit_tokens, d.peer_tokens));
  d.pending = d.prompt_tokens - std::max(d.hit_tokens, d.peer_tokens) + decode_work;
  d.routed_chain = chain(tinfo);
  {
    std::lock_guard lock(mu_);
    pending_[d.target.address] += d.pending;
    for (const BlockHash& h : d.routed_chain) {
      Routed& r = routed_[h][d.target.address];
      ++r.in_flight;
      r.last = d.dispatched;
    }
  }
  Count(d);
  if (!why.empty()) {  // --log-level debug only
    // The router's view of the cache waterfall: held at the target, pulled
    // from a peer, held elsewhere but not used, computed.
    const int64_t cached = std::max(d.hit_tokens, d.peer_tokens);
    LogDebug("router: kv-aware: {} prompt tokens -> {}{} [waterfall: pool {} peer {} routed_elsewhere {} computed {}];{}",
             d.prompt_tokens, d.target.address, d.peer ? " (peer " + d.peer->address + ")" : "", d.hit_tokens,
             d.peer ? d.peer_tokens - d.hit_tokens : 0, d.routed_elsewhere_tokens, d.prompt_tokens - cached, why);
  }
  return d;
}

Json KvRouter::PeerExport(const RouteDecision& d, std::span<const int32_t> prompt, const std::string& cache_salt,
                          const Json& model) {
  if (!d.peer || d.peer_tokens <= 0 || d.peer_tokens > static_cast<int64_t>(prompt.size())) return nullptr;
  Json b = {{"prompt", std::vector<int32_t>(prompt.begin(), prompt.begin() + d.peer_tokens)},
            {"max_tokens", 1},
            {"temperature", 0},
            {"stream", false},
            {"kv_transfer_params", {{"do_remote_decode", true}}}};
  if (!model.is_null()) b["model"] = model;
  if (!cache_salt.empty()) b["cache_salt"] = cache_salt;
  HttpCallOptions o = registry_->CallOptions();
  o.idle_timeout = std::chrono::milliseconds(30000);
  HttpCallResult r;
  registry_->AddOutstanding(d.peer->address, d.peer_tokens);
  Status s = HttpCall(d.peer->host, d.peer->port, "POST", "/v1/completions", b.dump(), o, &r);
  registry_->AddOutstanding(d.peer->address, -d.peer_tokens);
  const Json j = s.ok() && r.status == 200 ? Json::parse(r.body, nullptr, false) : Json();
  const bool ok = j.is_object() && j.contains("kv_transfer_params") && j["kv_transfer_params"].is_object();
  std::lock_guard lock(mu_);
  ++counters_.peer_fetches[ok ? "exported" : "failed"];
  if (!ok) {
    LogWarn("router: kv-aware: peer {} could not export {} prefix tokens ({}); {} computes them",
            d.peer->address, d.peer_tokens, s.ok() ? "HTTP " + std::to_string(r.status) : s.message(),
            d.target.address);
    return nullptr;
  }
  counters_.peer_fetch_tokens += d.peer_tokens - d.hit_tokens;
  return j["kv_transfer_params"];
}

void KvRouter::Done(const RouteDecision& d, bool ok) {
  if (options_.logic != RoutingLogic::kKvAware) return;
  const auto now = Clock::now();
  std::lock_guard lock(mu_);
  if (d.pending != 0) {
    if ((pending_[d.target.address] -= d.pending) == 0) pending_.erase(d.target.address);
  }
  for (const BlockHash& h : d.routed_chain) {
    auto it = routed_.find(h);
    if (it == routed_.end()) continue;
    auto at = it->second.find(d.target.address);
    if (at == it->second.end()) continue;
    at->second.in_flight = std::max(0, at->second.in_flight - 1);
    at->second.last = now;
  }
  if (!ok) return;
  auto it = infos_.find(d.target.address);
  if (it == infos_.end() || !it->second.known) return;
  // New full blocks were computed there: their BlockStored events are owed.
  const int64_t full = d.prompt_tokens / it->second.block_size * it->second.block_size;
  if (full > std::max(d.hit_tokens, d.peer_tokens) && !it->second.owed_since) {
    it->second.owed_since = d.dispatched;
    it->second.owed_done = Clock::now();
  }
}

void KvRouter::Count(const RouteDecision& d) {
  std::lock_guard lock(mu_);
  const std::string role = InstanceRoleName(d.role);
  ++counters_.decisions[{d.target.address, d.policy, role}];
  const int64_t hit = std::max(d.hit_tokens, d.peer ? d.peer_tokens : 0);
  counters_.hit_tokens[role] += hit;
  counters_.prefill_tokens[role] += d.prompt_tokens - hit;
  counters_.routed_elsewhere_tokens[role] += d.routed_elsewhere_tokens;
  const double ratio = d.prompt_tokens > 0 ? static_cast<double>(hit) / static_cast<double>(d.prompt_tokens) : 0;
  for (size_t i = 0; i < std::size(kRatioBounds); ++i) {
    if (ratio <= kRatioBounds[i]) {
      ++counters_.ratio_buckets[i];
      break;
    }
  }
  counters_.ratio_sum += ratio;
  ++counters_.ratio_count;
}

std::string KvRouter::SerializeMetrics() const {
  std::string out;
  std::lock_guard lock(mu_);
  out += "# HELP tessera:router_routing_decisions_total Instances chosen, per routing policy (kv-aware, load, "
         "round-robin, load-fallback: kv-aware without fresh events) and pool (role: prefill, decode).\n"
         "# TYPE tessera:router_routing_decisions_total counter\n";
  for (const auto& [k, n] : counters_.decisions) {
    out += fmt::format("tessera:router_routing_decisions_total{{instance=\"{}\",policy=\"{}\",role=\"{}\"}} {}\n",
                       Escape(std::get<0>(k)), std::get<1>(k), std::get<2>(k), n);
  }
  out += "# HELP tessera:router_prompt_hit_tokens_total Prompt tokens the chosen instance held (or pulled from a "
         "peer) per the prefix index, at decision time, per pool.\n"
         "# TYPE tessera:router_prompt_hit_tokens_total counter\n";
  for (const auto& [role, n] : counters_.hit_tokens) {
    out += fmt::format("tessera:router_prompt_hit_tokens_total{{role=\"{}\"}} {}\n", role, n);
  }
  out += "# HELP tessera:router_prompt_prefill_tokens_total Prompt tokens the chosen instance had to compute, per "
         "the prefix index, per pool.\n# TYPE tessera:router_prompt_prefill_tokens_total counter\n";
  for (const auto& [role, n] : counters_.prefill_tokens) {
    out += fmt::format("tessera:router_prompt_prefill_tokens_total{{role=\"{}\"}} {}\n", role, n);
  }
  out += "# HELP tessera:router_prompt_tokens_routed_elsewhere_total Prompt tokens another instance held (per the "
         "prefix index) beyond what the chosen one held or pulled: the cache waterfall's routed_elsewhere, per pool.\n"
         "# TYPE tessera:router_prompt_tokens_routed_elsewhere_total counter\n";
  for (const auto& [role, n] : counters_.routed_elsewhere_tokens) {
    out += fmt::format("tessera:router_prompt_tokens_routed_elsewhere_total{{role=\"{}\"}} {}\n", role, n);
  }
  out += "# HELP tessera:router_prompt_hit_ratio Per decision (both pools): prompt tokens held / prompt tokens.\n"
         "# TYPE tessera:router_prompt_hit_ratio histogram\n";
  int64_t cum = 0;
  for (size_t i = 0; i < std::size(kRatioBounds); ++i) {
    cum += counters_.ratio_buckets[i];
    out += fmt::format("tessera:router_prompt_hit_ratio_bucket{{le=\"{}\"}} {}\n", kRatioBounds[i], cum);
  }
  out += fmt::format("tessera:router_prompt_hit_ratio_bucket{{le=\"+Inf\"}} {}\n", counters_.ratio_count);
  out += fmt::format("tessera:router_prompt_hit_ratio_sum {}\n", counters_.ratio_sum);
  out += fmt::format("tessera:router_prompt_hit_ratio_count {}\n", counters_.ratio_count);
  out += "# HELP tessera:router_kv_peer_fetches_total Prefix exports asked of a holder for another instance.\n"
         "# TYPE tessera:router_kv_peer_fetches_total counter\n";
  for (const char* k : {"exported", "failed"}) {
    auto it = counters_.peer_fetches.find(k);
    out += fmt::format("tessera:router_kv_peer_fetches_total{{outcome=\"{}\"}} {}\n", k,
                       it == counters_.peer_fetches.end() ? 0 : it->second);
  }
  out += "# HELP tessera:router_kv_peer_fetch_tokens_total Prompt tokens handed over from peers instead of computed.\n"
         "# TYPE tessera:router_kv_peer_fetch_tokens_total counter\n";
  out += fmt::format("tessera:router_kv_peer_fetch_tokens_total {}\n", counters_.peer_fetch_tokens);
  if (!index_) return out;
  const auto now = Clock::now();
  const std::vector<kv_events::InstanceMatch> all = index_->Match(std::span<const kv_events::HashKey>());
  out += "# HELP tessera:router_kv_index_blocks Blocks the prefix index says each instance holds.\n"
         "# TYPE tessera:router_kv_index_blocks gauge\n";
  for (const auto& m : all) {
    out += fmt::format("tessera:router_kv_index_blocks{{instance=\"{}\"}} {}\n", Escape(m.instance), m.held_blocks);
  }
  out += "# HELP tessera:router_kv_events_age_seconds Seconds since each instance's last KV event batch (or "
         "subscription).\n# TYPE tessera:router_kv_events_age_seconds gauge\n";
  for (const auto& m : all) {
    out += fmt::format("tessera:router_kv_events_age_seconds{{instance=\"{}\"}} {:.3f}\n", Escape(m.instance),
                       m.last_event_age_s);
  }
  out += "# HELP tessera:router_kv_instance_stale Whether the router routes on load only because of this instance "
         "(no events, not subscribed, or events overdue).\n# TYPE tessera:router_kv_instance_stale gauge\n";
  for (const auto& [address, info] : infos_) {
    const kv_events::InstanceMatch* m = nullptr;
    for (const auto& x : all) {
      if (x.instance == address) m = &x;
    }
    out += fmt::format("tessera:router_kv_instance_stale{{instance=\"{}\"}} {}\n", Escape(address),
                       Stale(info, m, now) ? 1 : 0);
  }
  const kv_events::KvEventSubscriberStats st = subscriber_->stats();
  out += "# HELP tessera:router_kv_event_batches_total KV event batches applied to the prefix index.\n"
         "# TYPE tessera:router_kv_event_batches_total counter\n";
  out += fmt::format("tessera:router_kv_event_batches_total {}\n", st.batches_applied);
  out += "# HELP tessera:router_kv_event_gaps_total Sequence gaps (filled by replay, else the instance cleared).\n"
         "# TYPE tessera:router_kv_event_gaps_total counter\n";
  out += fmt::format("tessera:router_kv_event_gaps_total {}\n", st.gaps);
  out += "# HELP tessera:router_kv_event_replays_total Replays answered (subscription, gap, restart).\n"
         "# TYPE tessera:router_kv_event_replays_total counter\n";
  out += fmt::format("tessera:router_kv_event_replays_total {}\n", st.replays);
  return out;
}

}  // namespace tessera
