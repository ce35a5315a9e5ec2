// RankGroup: the ranks of one parallel model instance as `tessera serve` runs
// them (docs/architecture.md, "Parallelism"). Rank 0 owns the scheduler and the API; every step it
// broadcasts the plan (KV block copies + the ForwardBatch) and all ranks run it
// in lockstep (ShardedForward). Workers execute plans until told to stop.
//
//   one node  (nnodes 1): ranks 1..N-1 are threads of this process, each with its
//             own CPU backend, model shard and KV pool; in-process communicator.
//   many nodes / processes (nnodes > 1): one rank per process, Gloo over TCP,
//             joined through the rendezvous store at --leader-addr; processes with
//             --node-rank > 0 run RunRankWorker and serve no API.
//
// Liveness: every collective is bounded by `timeout`. While idle, rank 0
// broadcasts a no-op plan every timeout / 4, so workers never time out on a
// quiet server and a dead worker is noticed within one heartbeat. After any
// failure the group is broken: error() is set, Step fails at once with it.
// Thread safety: Step/Stop from the engine loop thread; error() from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/forward_batch.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/parallel/communicator.h"
#include "engine/parallel/rendezvous.h"
#include "engine/parallel/shard/model_shard.h"

namespace tessera::parallel {

// vLLM's flags: --tensor-parallel-size, --data-parallel-size, --enable-expert-parallel.
struct GroupOptions {
  int tensor_parallel_size = 1;
  int data_parallel_size = 1;
  bool enable_expert_parallel = false;
  EplbOptions eplb;      // --enable-eplb, --eplb-config, --num-redundant-experts
  LaunchOptions launch;  // --nnodes / --node-rank / --leader-addr (or LWS_* env)
  std::chrono::milliseconds timeout{30000};
  int world_size() const { return tensor_parallel_size * data_parallel_size; }
  bool parallel() const { return world_size() > 1; }
};

// vLLM's EPLB flags as options: --eplb-config fields over the defaults, and
// --num-redundant-experts (-1: not given) where the config does not set it
// (both set and different: an error). Checks no model.
StatusOr<EplbOptions> EplbFromFlags(bool enable_eplb, const std::string& eplb_config, int64_t num_redundant_experts);

// The shard layout of `rank` for these flags (DP > 1 means data-parallel
// attention with expert parallelism; TP and DP together are not supported).
StatusOr<ShardOptions> ShardOptionsFor(const GroupOptions& options, int rank);
// CPU threads of each rank: `num_threads` when set, else the cores divided
// among the in-process ranks (0 = all, for one rank per process).
int ThreadsPerRank(const GroupOptions& options, int num_threads);
// Whether this process is a worker (a rank other than 0 under --nnodes).
StatusOr<bool> IsWorkerProcess(const GroupOptions& options);

struct RankTimes {
  double step_seconds = 0;        // summed over steps
  double collective_seconds = 0;  // of which in collectives
};

class RankGroup {
 public:
  // Rank 0: creates the communicator (in-process group, or joins the Gloo group
  // and waits for every rank up to the timeout) and, on one node, starts the
  // worker threads loading their shards.
  static StatusOr<std::unique_ptr<RankGroup>> Create(const GroupOptions& options, const std::string& model_dir,
                                                     int num_threads);
  ~RankGroup();  // Stop()

  const ParallelSetup& leader_setup() const { return setup0_; }
  int world_size() const { return options_.world_size(); }

  // After rank 0 loaded its shard (`loaded`: its status) and sized the KV pool:
  // all ranks report their load, workers create pools of the same geometry and
  // take the same max model length (Model::SetMaxModelLen).
  // Fails naming the ranks that could not load.
  Status Start(const Status& loaded, int64_t num_blocks, int64_t block_size, int64_t max_model_len);
  // One step on every rank; logits as ShardedForward's rank 0.
  Status Step(Model& model, KvCache* cache, const std::vector<std::pair<int64_t, int64_t>>& copies,
              const ForwardBatch& batch, std::vector<float>* logits);
  // Tells the workers to exit (when the group is healthy) and joins threads.
  void Stop();
  // OK while every rank is alive and in step.
  Status error() const;
  // Per rank, cumulative (reported by each rank after every step).
  std::vector<RankTimes> rank_times() const;

 private:
  RankGroup() = default;
  Status Broken(const Status& s);
  void Heartbeat();

  GroupOptions options_;
  ParallelSetup setup0_;
  std::unique_ptr<class InProcessGroup> inproc_;
  std::unique_ptr<Communicator> gloo_;
  std::vector<std::thread> workers_;
  std::thread heartbeat_;
  mutable std::mutex mu_;  // one broadcast at a time (steps and heartbeats)
  std::chrono::steady_clock::time_point last_plan_;
  Status error_;
  bool started_ = false, stopping_ = false;
  std::vector<RankTimes> times_;
  std::atomic<bool> stop_heartbeat_{false};
};

// A worker rank (a --node-rank > 0 process, or a thread of RankGroup): loads
// its shard, joins Start's handshake, then runs plans until the stop plan (OK)
// or a failure (the error).
Status RunRankWorker(Communicator* comm, const ShardOptions& shard, const std::string& model_dir, int num_threads);
// --node-rank > 0 processes: joins the Gloo group, then RunRankWorker.
Status RunWorkerProcess(const GroupOptions& options, const std::string& model_dir, int num_threads);

}  // namespace tessera::parallel
