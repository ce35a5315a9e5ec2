#include "engine/parallel/shard/rank_group.h"
#include "common/log.h"


#include "common/thread_pool.h"
#include "engine/parallel/gloo_communicator.h"
#include "engine/parallel/inproc.h"
#include "engine/parallel/shard/sharded_forward.h"

namespace tessera::parallel {
namespace {

enum PlanKind : int64_t { kNoop = 0, kForward = 1, kStop = 2 };

// A plan as int64 words: kind, copies, then the batch's arrays with their sizes.
std::vector<int64_t> Encode(PlanKind kind, const std::vector<std::pair<int64_t, int64_t>>& copies,
                            const ForwardBatch* b) {
  std::vector<int64_t> w = {kind, static_cast<int64_t>(copies.size())};
  for (const auto& [s, d] : copies) w.push_back(s), w.push_back(d);
  if (b == nullptr) return w;
  w.push_back(b->num_seqs);
  w.push_back(b->max_blocks_per_seq);
  auto put = [&w](const auto& v) {
    w.push_back(static_cast<int64_t>(v.size()));
    w.insert(w.end(), v.begin(), v.end());
  };
  put(b->token_ids), put(b->positions), put(b->token_to_seq), put(b->slot_mapping), put(b->block_tables),
      put(b->logits_indices);
  return w;
}

Status Decode(const std::vector<int64_t>& w, PlanKind* kind, std::vector<std::pair<int64_t, int64_t>>* copies,
              ForwardBatch* b) {
  size_t at = 0;
  auto next = [&](int64_t* v) -> bool {
    if (at >= w.size()) return false;
    *v = w[at++];
    return true;
  };
  int64_t k = 0, n = 0;
  if (!next(&k) || !next(&n) || n < 0) return DataLoss("parallel plan: truncated");
  *kind = static_cast<PlanKind>(k);
  copies->clear();
  for (int64_t i = 0; i < n; ++i) {
    int64_t s = 0, d = 0;
    if (!next(&s) || !next(&d)) return DataLoss("parallel plan: truncated copies");
    copies->emplace_back(s, d);
  }
  if (k != kForward) return Status::Ok();
  if (!next(&b->num_seqs) || !next(&b->max_blocks_per_seq)) return DataLoss("parallel plan: truncated batch");
  auto get = [&](auto* v) -> bool {
    int64_t len = 0;
    if (!next(&len) || len < 0 || at + static_cast<size_t>(len) > w.size()) return false;
    v->assign(w.begin() + static_cast<int64_t>(at), w.begin() + static_cast<int64_t>(at) + len);
    at += static_cast<size_t>(len);
    return true;
  };
  if (!get(&b->token_ids) || !get(&b->positions) || !get(&b->token_to_seq) || !get(&b->slot_mapping) ||
      !get(&b->block_tables) || !get(&b->logits_indices)) {
    return DataLoss("parallel plan: truncated batch");
  }
  return Status::Ok();
}

Status BroadcastWords(Communicator* comm, std::vector<int64_t>* words) {
  int64_t n = static_cast<int64_t>(words->size());
  RETURN_IF_ERROR(comm->Broadcast(&n, 1, DType::kI64, 0));
  words->resize(static_cast<size_t>(n));
  return comm->Broadcast(words->data(), n, DType::kI64, 0);
}

// Every rank's load status: f32 flags gathered; fails naming the ranks that failed.
Status Handshake(Communicator* comm, const Status& mine) {
  const int n = comm->world_size();
  float flag = mine.ok() ? 0.0f : 1.0f;
  std::vector<float> all(n);
  RETURN_IF_ERROR(comm->AllGather(&flag, all.data(), 1, DType::kF32));
  std::string bad;
  for (int r = 0; r < n; ++r) {
    if (all[r] != 0.0f) bad += (bad.empty() ? "" : ", ") + std::to_string(r);
  }
  if (!mine.ok()) return mine;
  if (!bad.empty()) return FailedPrecondition("parallel group: rank(s) " + bad + " failed to load the model");
  return Status::Ok();
}

// Each rank's step and collective seconds, gathered after every step.
Status GatherTimes(Communicator* comm, double step_s, double coll_s, std::vector<float>* out) {
  const float mine[2] = {static_cast<float>(step_s), static_cast<float>(coll_s)};
  out->resize(2 * comm->world_size());
  return comm->AllGather(mine, out->data(), 2, DType::kF32);
}

}  // namespace

StatusOr<EplbOptions> EplbFromFlags(bool enable, const std::string& config, int64_t redundant) {
  EplbOptions e;
  e.enabled = enable;
  bool in_config = false;
  if (!config.empty()) {
    ASSIGN_OR_RETURN(e, ParseEplbConfig(config, e, &in_config));
  }
  if (redundant >= 0 && in_config && e.num_redundant_experts != redundant) {
    return InvalidArgument("--num-redundant-experts " + std::to_string(redundant) +
                           " and --eplb-config's num_redundant_experts " + std::to_string(e.num_redundant_experts) +
                           " disagree; give one");
  }
  if (redundant >= 0 && !in_config) e.num_redundant_experts = redundant;
  if (!enable && !config.empty()) {
    return InvalidArgument("--eplb-config needs --enable-eplb (for static replicas without rebalancing use "
                           "--num-redundant-experts alone)");
  }
  return e;
}

StatusOr<ShardOptions> ShardOptionsFor(const GroupOptions& o, int rank) {
  if (o.tensor_parallel_size < 1 || o.data_parallel_size < 1) {
    return InvalidArgument("--tensor-parallel-size and --data-parallel-size must be >= 1");
  }
  if (o.tensor_parallel_size > 1 && o.data_parallel_size > 1) {
    return InvalidArgument("--tensor-parallel-size and --data-parallel-size > 1 together are not supported yet; "
                           "use one of them");
  }
  if (o.eplb.uses_map() && (!o.enable_expert_parallel || o.world_size() < 2)) {
    return InvalidArgument("--enable-eplb / --num-redundant-experts balance experts over ranks: they need "
                           "--enable-expert-parallel with --tensor-parallel-size or --data-parallel-size > 1");
  }
  if (o.data_parallel_size > 1 && !o.enable_expert_parallel) {
    return InvalidArgument("--data-parallel-size > 1 shares one group only with --enable-expert-parallel "
                           "(data-parallel attention, experts on ranks); for plain data parallelism run "
                           "several instances behind a router");
  }
  ShardOptions s;
  s.world_size = o.world_size();
  s.rank = rank;
  s.expert_parallel = o.enable_expert_parallel;
  s.data_parallel_attention = o.data_parallel_size > 1;
  s.eplb = o.eplb;
  return s;
}

namespace {

StatusOr<RendezvousOptions> ProcessRendezvous(const GroupOptions& o) {
  LaunchOptions l = o.launch;
  l.timeout = o.timeout;
  ASSIGN_OR_RETURN(RendezvousOptions rv, ResolveRendezvous(l));
  if (rv.nnodes != o.world_size()) {
    return InvalidArgument("--nnodes " + std::to_string(rv.nnodes) + " with " + std::to_string(o.world_size()) +
                           " ranks: multi-process groups run one rank per process, so --nnodes must equal "
                           "--tensor-parallel-size x --data-parallel-size");
  }
  return rv;
}

}  // namespace

StatusOr<bool> IsWorkerProcess(const GroupOptions& o) {
  if (!o.parallel()) return false;
  ASSIGN_OR_RETURN(RendezvousOptions rv, ResolveRendezvous(o.launch));
  if (rv.nnodes <= 1) return false;
  return rv.node_rank != 0;
}

int ThreadsPerRank(const GroupOptions& o, int num_threads) {
  if (num_threads > 0) return num_threads;
  StatusOr<RendezvousOptions> rv = ResolveRendezvous(o.launch);
  const bool threads = rv.ok() && rv->nnodes <= 1;  // ranks share this process's cores
  return threads ? std::max(1, ThreadPool::HardwareThreads() / o.world_size()) : 0;
}

StatusOr<std::unique_ptr<RankGroup>> RankGroup::Create(const GroupOptions& o, const std::string& model_dir,
                                                       int num_threads) {
  num_threads = ThreadsPerRank(o, num_threads);
  auto g = std::unique_ptr<RankGroup>(new RankGroup());
  g->options_ = o;
  g->times_.resize(o.world_size());
  ASSIGN_OR_RETURN(g->setup0_.shard, ShardOptionsFor(o, 0));
  ASSIGN_OR_RETURN(RendezvousOptions rv, ResolveRendezvous(o.launch));
  if (rv.nnodes > 1) {
    ASSIGN_OR_RETURN(rv, ProcessRendezvous(o));
    LogInfo("parallel: rank 0 of {} waiting for the group at {}:{} (up to {} ms)", o.world_size(),
            rv.leader_host, rv.leader_port, o.timeout.count());
    ASSIGN_OR_RETURN(g->gloo_, CreateGlooCommunicator(rv));
    g->setup0_.comm = g->gloo_.get();
  } else {
    ASSIGN_OR_RETURN(g->inproc_, InProcessGroup::Create(o.world_size(), {o.timeout}));
    g->setup0_.comm = &g->inproc_->communicator(0);
    for (int r = 1; r < o.world_size(); ++r) {
      ASSIGN_OR_RETURN(ShardOptions so, ShardOptionsFor(o, r));
      Communicator* comm = &g->inproc_->communicator(r);
      g->workers_.emplace_back([comm, so, model_dir, num_threads] {
        Status s = RunRankWorker(comm, so, model_dir, num_threads);
        if (!s.ok()) LogError("parallel: rank {} stopped: {}", so.rank, s.ToString());
      });
    }
  }
  LogInfo("parallel: {} ranks ({}; tensor-parallel {}, data-parallel {}, expert-parallel {}, "
          "redundant experts {}, eplb {})",
          o.world_size(), g->gloo_ ? "gloo processes" : "in-process threads", o.tensor_parallel_size,
          o.data_parallel_size, o.enable_expert_parallel ? "on" : "off", o.eplb.num_redundant_experts,
          o.eplb.enabled ? "every " + std::to_string(o.eplb.step_interval) + " steps over a window of " +
                                    std::to_string(o.eplb.window_size)
                              : std::string("off"));
  return g;
}

RankGroup::~RankGroup() { Stop(); }

Status RankGroup::Broken(const Status& s) {
  std::string msg = "parallel group of " + std::to_string(world_size()) + " ranks failed: " + s.message();
  if (error_.ok()) {
    error_ = Status(StatusCode::kUnavailable, msg);
    LogError("{}", msg);
  }
  return error_;
}

Status RankGroup::Start(const Status& loaded, int64_t num_blocks, int64_t block_size, int64_t max_model_len) {
  std::lock_guard lock(mu_);
  Communicator* comm = setup0_.comm;
  Status s = Handshake(comm, loaded);
  if (!s.ok()) return Broken(s);
  int64_t geometry[3] = {num_blocks, block_size, max_model_len};
  if (Status b = comm->Broadcast(geometry, 3, DType::kI64, 0); !b.ok()) return Broken(b);
  started_ = true;
  last_plan_ = std::chrono::steady_clock::now();
  heartbeat_ = std::thread([this] { Heartbeat(); });
  return Status::Ok();
}

void RankGroup::Heartbeat() {
  const auto every = std::max(options_.timeout / 4, std::chrono::milliseconds(10));
  while (!stop_heartbeat_.load()) {
    std::this_thread::sleep_for(std::min(every, std::chrono::milliseconds(50)));
    std::lock_guard lock(mu_);
    if (!error_.ok() || stopping_ || std::chrono::steady_clock::now() - last_plan_ < every) continue;
    std::vector<int64_t> w = Encode(kNoop, {}, nullptr);
    if (Status s = BroadcastWords(setup0_.comm, &w); !s.ok()) {
      (void)Broken(s);
      continue;
    }
    last_plan_ = std::chrono::steady_clock::now();
  }
}

Status RankGroup::Step(Model& model, KvCache* cache, const std::vector<std::pair<int64_t, int64_t>>& copies,
                       const ForwardBatch& batch, std::vector<float>* logits) {
  std::lock_guard lock(mu_);
  if (!error_.ok()) return error_;
  if (!started_) return FailedPrecondition("parallel group: not started");
  const auto t0 = std::chrono::steady_clock::now();
  const double coll0 = model.shard()->collective_seconds();
  Communicator* comm = setup0_.comm;
  std::vector<int64_t> w = Encode(kForward, copies, &batch);
  if (Status s = BroadcastWords(comm, &w); !s.ok()) return Broken(s);
  last_plan_ = std::chrono::steady_clock::now();
  if (Status s = ShardedForward(model, batch, cache, logits); !s.ok()) return Broken(s);
  const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<float> times;
  if (Status s = GatherTimes(comm, step_s, model.shard()->collective_seconds() - coll0, &times); !s.ok()) {
    return Broken(s);
  }
  for (int r = 0; r < world_size(); ++r) {
    times_[r].step_seconds += times[2 * r];
    times_[r].collective_seconds += times[2 * r + 1];
  }
  return Status::Ok();
}

void RankGroup::Stop() {
  stop_heartbeat_.store(true);
  if (heartbeat_.joinable()) heartbeat_.join();
  {
    std::lock_guard lock(mu_);
    if (started_ && error_.ok() && !stopping_) {
      std::vector<int64_t> w = Encode(kStop, {}, nullptr);
      if (Status s = BroadcastWords(setup0_.comm, &w); !s.ok()) (void)Broken(s);
    }
    stopping_ = true;
  }
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
}

Status RankGroup::error() const {
  std::lock_guard lock(mu_);
  return error_;
}

std::vector<RankTimes> RankGroup::rank_times() const {
  std::lock_guard lock(mu_);
  return times_;
}

Status RunRankWorker(Communicator* comm, const ShardOptions& shard, const std::string& model_dir, int num_threads) {
  auto backend = MakeCpuBackend({num_threads});
  ParallelSetup setup{shard, comm};
  StatusOr<std::unique_ptr<Model>> model = Model::Load(model_dir, backend.get(), &setup);
  RETURN_IF_ERROR(Handshake(comm, model.status()));
  int64_t geometry[3] = {0, 0, 0};
  RETURN_IF_ERROR(comm->Broadcast(geometry, 3, DType::kI64, 0));
  ASSIGN_OR_RETURN(auto cache, (*model)->CreateKvCache(geometry[0], geometry[1]));
  RETURN_IF_ERROR((*model)->SetMaxModelLen(geometry[2]));
  LogInfo("parallel: rank {} ready ({} KV blocks of {})", shard.rank, geometry[0], geometry[1]);
  std::vector<int64_t> words;
  std::vector<std::pair<int64_t, int64_t>> copies;
  ForwardBatch batch;
  std::vector<float> logits, times;
  while (true) {
    RETURN_IF_ERROR(BroadcastWords(comm, &words));
    PlanKind kind = kNoop;
    RETURN_IF_ERROR(Decode(words, &kind, &copies, &batch));
    if (kind == kStop) return Status::Ok();
    if (kind != kForward) continue;
    const auto t0 = std::chrono::steady_clock::now();
    const double coll0 = (*model)->shard()->collective_seconds();
    if (!copies.empty()) RETURN_IF_ERROR(cache->CopyBlocks(copies));
    RETURN_IF_ERROR(ShardedForward(**model, batch, cache.get(), &logits));
    const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RETURN_IF_ERROR(GatherTimes(comm, step_s, (*model)->shard()->collective_seconds() - coll0, &times));
  }
}

Status RunWorkerProcess(const GroupOptions& o, const std::string& model_dir, int num_threads) {
  ASSIGN_OR_RETURN(RendezvousOptions rv, ProcessRendezvous(o));
  ASSIGN_OR_RETURN(ShardOptions so, ShardOptionsFor(o, rv.rank));
  LogInfo("parallel: rank {} of {} joining the group at {}:{}", rv.rank, rv.world_size, rv.leader_host,
          rv.leader_port);
  ASSIGN_OR_RETURN(auto comm, CreateGlooCommunicator(rv));
  return RunRankWorker(comm.get(), so, model_dir, num_threads);
}

}  // namespace tessera::parallel
