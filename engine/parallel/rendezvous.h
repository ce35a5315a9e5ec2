// How the ranks of one parallel group find each other, on one node or many.
//
// A group is nnodes nodes x ranks_per_node ranks; rank = node_rank * ranks_per_node
// + local_rank. The leader (rank 0, on node 0) hosts the rendezvous store at
// leader_addr; every rank connects to it, claims its rank (a second claim is an
// error) and waits for the roll call to complete. A rank that never joins makes
// the others fail after `timeout` with the missing ranks named. Gloo's pair
// addresses and NCCL's unique id then travel through the same store.
//
// Options come from the command line (vLLM/torchrun style: --nnodes, --node-rank,
// --leader-addr host:port) or, where a flag is not given, from Kubernetes
// LeaderWorkerSet's environment: LWS_LEADER_ADDRESS (host, no port: kDefaultPort),
// LWS_GROUP_SIZE (nodes in the group), LWS_WORKER_INDEX (this node; 0 = leader).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "engine/parallel/store.h"

namespace tessera::parallel {

inline constexpr int kDefaultRendezvousPort = 29500;  // torch.distributed's MASTER_PORT default

// What the command line says; unset fields are taken from the environment.
struct LaunchOptions {
  int nnodes = 0;           // 0: LWS_GROUP_SIZE, else 1
  int node_rank = -1;       // -1: LWS_WORKER_INDEX, else 0
  std::string leader_addr;  // "host[:port]"; empty: LWS_LEADER_ADDRESS, else 127.0.0.1 (single node only)
  int ranks_per_node = 1;   // e.g. the tensor-parallel ranks of one node
  int local_rank = 0;       // this rank on its node, < ranks_per_node
  std::chrono::milliseconds timeout{60000};
};

struct RendezvousOptions {
  std::string leader_host;
  int leader_port = kDefaultRendezvousPort;
  int nnodes = 1, node_rank = 0, ranks_per_node = 1, local_rank = 0;
  int world_size = 1, rank = 0;
  std::chrono::milliseconds timeout{60000};
  std::string group = "tessera";  // key prefix in the store
};

using GetEnvFn = std::function<const char*(const char*)>;

// Merges flags and LWS environment (flags win) and validates the result.
StatusOr<RendezvousOptions> ResolveRendezvous(const LaunchOptions& launch, const GetEnvFn& getenv);
StatusOr<RendezvousOptions> ResolveRendezvous(const LaunchOptions& launch);  // process environment

// A joined group: the store (and, on rank 0, the server behind it). Keep it alive
// while ranks may still use the store (communicator setup).
struct Rendezvous {
  RendezvousOptions options;
  std::unique_ptr<TcpStoreServer> server;  // rank 0 only
  std::unique_ptr<Store> store;
};

// Rank 0 starts the store at leader_addr; all ranks connect, claim their rank and
// wait for every other rank. Errors name the leader address and missing ranks.
// Each rank also registers "<group>/gone/<rank>", which the server sets when that
// rank's store connection closes (its process ended).
StatusOr<std::unique_ptr<Rendezvous>> JoinRendezvous(const RendezvousOptions& options);

// After a failed collective: which ranks have exited, from the store, e.g.
// "rank 2 exited" or "the leader (rank 0) is unreachable"; "" when none is known
// to be gone. Waits up to `settle` for the server to notice a death.
std::string DescribeGoneRanks(Rendezvous& rv, std::chrono::milliseconds settle);

}  // namespace tessera::parallel
