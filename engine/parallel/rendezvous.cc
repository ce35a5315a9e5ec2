#include "engine/parallel/rendezvous.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <thread>
#include <vector>

namespace tessera::parallel {

namespace {

Status ParseEnvInt(const char* name, const char* value, int* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || errno != 0 || v < 0 || v > 1 << 20)
    return InvalidArgument(std::string(name) + "='" + value + "' is not a non-negative integer");
  *out = static_cast<int>(v);
  return Status::Ok();
}

std::string JoinKey(const RendezvousOptions& o, int rank) { return o.group + "/join/" + std::to_string(rank); }
std::string GoneKey(const RendezvousOptions& o, int rank) { return o.group + "/gone/" + std::to_string(rank); }

}  // namespace

StatusOr<RendezvousOptions> ResolveRendezvous(const LaunchOptions& launch, const GetEnvFn& getenv) {
  RendezvousOptions o;
  o.timeout = launch.timeout;
  o.nnodes = launch.nnodes > 0 ? launch.nnodes : 1;
  if (launch.nnodes <= 0) {
    if (const char* v = getenv("LWS_GROUP_SIZE")) RETURN_IF_ERROR(ParseEnvInt("LWS_GROUP_SIZE", v, &o.nnodes));
  }
  o.node_rank = launch.node_rank >= 0 ? launch.node_rank : 0;
  if (launch.node_rank < 0) {
    if (const char* v = getenv("LWS_WORKER_INDEX")) RETURN_IF_ERROR(ParseEnvInt("LWS_WORKER_INDEX", v, &o.node_rank));
  }
  std::string addr = launch.leader_addr;
  if (addr.empty()) {
    if (const char* v = getenv("LWS_LEADER_ADDRESS"); v != nullptr && *v != '\0') addr = v;
  }
  if (addr.empty()) {
    if (o.nnodes > 1)
      return InvalidArgument("--nnodes " + std::to_string(o.nnodes) +
                             " needs --leader-addr host:port (or LWS_LEADER_ADDRESS)");
    addr = "127.0.0.1";
  }
  // A bare host (LWS gives one) gets the default port; "[v6]" and "host:port" are parsed.
  const bool bare = addr.find(':') == std::string::npos || (addr.front() == '[' && addr.back() == ']');
  if (bare) addr += ":" + std::to_string(kDefaultRendezvousPort);
  RETURN_IF_ERROR(ParseHostPort(addr, &o.leader_host, &o.leader_port));
  if (o.nnodes < 1) return InvalidArgument("--nnodes must be >= 1, got " + std::to_string(o.nnodes));
  if (o.node_rank >= o.nnodes)
    return InvalidArgument("--node-rank " + std::to_string(o.node_rank) + " is not below --nnodes " +
                           std::to_string(o.nnodes));
  if (launch.ranks_per_node < 1)
    return InvalidArgument("ranks per node must be >= 1, got " + std::to_string(launch.ranks_per_node));
  if (launch.local_rank < 0 || launch.local_rank >= launch.ranks_per_node)
    return InvalidArgument("local rank " + std::to_string(launch.local_rank) + " is not below ranks per node " +
                           std::to_string(launch.ranks_per_node));
  if (launch.timeout.count() <= 0) return InvalidArgument("rendezvous timeout must be positive");
  o.ranks_per_node = launch.ranks_per_node;
  o.local_rank = launch.local_rank;
  o.world_size = o.nnodes * o.ranks_per_node;
  o.rank = o.node_rank * o.ranks_per_node + o.local_rank;
  return o;
}

StatusOr<RendezvousOptions> ResolveRendezvous(const LaunchOptions& launch) {
  return ResolveRendezvous(launch, [](const char* n) -> const char* { return std::getenv(n); });
}

StatusOr<std::unique_ptr<Rendezvous>> JoinRendezvous(const RendezvousOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    return InvalidArgument("rendezvous: rank " + std::to_string(o.rank) + " outside world size " +
                           std::to_string(o.world_size));
  auto rv = std::make_unique<Rendezvous>();
  rv->options = o;
  const std::string where = o.leader_host + ":" + std::to_string(o.leader_port);
  if (o.rank == 0) {
    // Loopback leaders stay on loopback; otherwise listen on every interface.
    const bool loopback = o.leader_host == "127.0.0.1" || o.leader_host == "localhost" || o.leader_host == "::1";
    ASSIGN_OR_RETURN(rv->server, TcpStoreServer::Start(loopback ? o.leader_host : "", o.leader_port));
  }
  ASSIGN_OR_RETURN(auto store, TcpStore::Connect(o.leader_host, o.leader_port, o.timeout));
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string me = std::string(host) + " pid " + std::to_string(::getpid());
  ASSIGN_OR_RETURN(bool claimed, store->Create(JoinKey(o, o.rank), std::vector<char>(me.begin(), me.end())));
  if (!claimed) {
    auto other = store->Get(JoinKey(o, o.rank), o.timeout);
    return InvalidArgument("rendezvous at " + where + ": rank " + std::to_string(o.rank) +
                           " joined twice (already claimed by " +
                           (other.ok() ? std::string(other->begin(), other->end()) : "?") + ")");
  }
  RETURN_IF_ERROR(store->SetOnDisconnect(GoneKey(o, o.rank), std::vector<char>(me.begin(), me.end())));
  std::vector<std::string> keys;
  for (int r = 0; r < o.world_size; ++r) keys.push_back(JoinKey(o, r));
  Status st = store->Wait(keys, o.timeout);
  if (st.code() == StatusCode::kDeadlineExceeded) {
    std::string missing;
    for (int r = 0; r < o.world_size; ++r) {
      Status k = store->Get(keys[r], std::chrono::milliseconds(0)).status();
      if (k.code() == StatusCode::kDeadlineExceeded) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      else RETURN_IF_ERROR(k);  // the store itself failed (leader gone)
    }
    return Status(StatusCode::kDeadlineExceeded,
                  "rendezvous at " + where + ": rank(s) " + missing + " never joined within " +
                      std::to_string(o.timeout.count()) + " ms (world size " + std::to_string(o.world_size) +
                      ", this is rank " + std::to_string(o.rank) + ")");
  }
  RETURN_IF_ERROR(st);
  rv->store = std::move(store);
  return rv;
}

std::string DescribeGoneRanks(Rendezvous& rv, std::chrono::milliseconds settle) {
  const RendezvousOptions& o = rv.options;
  const auto deadline = std::chrono::steady_clock::now() + settle;
  for (;;) {
    std::string gone;
    for (int r = 0; r < o.world_size; ++r) {
      if (r == o.rank) continue;
      auto v = rv.store->Get(GoneKey(o, r), std::chrono::milliseconds(0));
      if (v.ok()) {
        gone += (gone.empty() ? "rank " : ", rank ") + std::to_string(r) + " (" + std::string(v->begin(), v->end()) + ")";
      } else if (v.status().code() != StatusCode::kDeadlineExceeded) {
        return o.rank == 0 ? "" : "the leader (rank 0) is unreachable";
      }
    }
    if (!gone.empty()) return gone + " exited";
    if (std::chrono::steady_clock::now() >= deadline) return "";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace tessera::parallel
