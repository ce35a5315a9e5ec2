#include "engine/parallel/inproc.h"

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>

#include "engine/parallel/reduce.h"

namespace tessera::parallel {

namespace {

enum class Op { kAllReduce, kAllGather, kReduceScatter, kAllToAllV, kBroadcast, kBarrier };

const char* OpName(Op op) {
  switch (op) {
    case Op::kAllReduce: return "all_reduce";
    case Op::kAllGather: return "all_gather";
    case Op::kReduceScatter: return "reduce_scatter";
    case Op::kAllToAllV: return "all_to_all_v";
    case Op::kBroadcast: return "broadcast";
    case Op::kBarrier: return "barrier";
  }
  return "?";
}

// What one rank posted for the current collective; valid until the last phase.
struct Post {
  Op op = Op::kBarrier;
  const void* send = nullptr;
  void* recv = nullptr;
  int64_t count = 0;
  DType dtype = DType::kF32;
  int root = 0;
  // Copies: a rank that finds a mismatch returns (freeing its arguments) while
  // the others may still be reading these.
  std::vector<int64_t> send_counts, recv_counts;
};

struct Mailbox {  // one per (src, dst): at most one Send in flight (sends are synchronous)
  const void* data = nullptr;
  int64_t bytes = 0;
  bool full = false;
};

using Clock = std::chrono::steady_clock;

Post MakePost(Op op, const void* send, void* recv, int64_t count, DType dtype) {
  Post p;
  p.op = op;
  p.send = send;
  p.recv = recv;
  p.count = count;
  p.dtype = dtype;
  return p;
}

}  // namespace

class InProcessGroupState {
 public:
  InProcessGroupState(int n, InProcessOptions o)
      : n_(n), options_(o), here_(n, false), posts_(n), mail_(static_cast<size_t>(n) * n) {}

  int n() const { return n_; }
  Clock::time_point Deadline() const { return Clock::now() + options_.timeout; }
  Post& post(int r) { return posts_[r]; }
  std::vector<uint8_t>& scratch() { return scratch_; }

  Status Broken() {
    std::lock_guard<std::mutex> lk(mu_);
    return broken_;
  }
  void Break(Status s) {
    std::lock_guard<std::mutex> lk(mu_);
    if (broken_.ok()) broken_ = std::move(s);
    cv_.notify_all();
  }
  void GrowScratch(size_t bytes) {
    std::lock_guard<std::mutex> lk(mu_);
    if (scratch_.size() < bytes) scratch_.resize(bytes);
  }

  // Barrier phase: returns when all n ranks arrived, or an error once the group is
  // broken or the deadline passes (which breaks the group, naming who is missing).
  Status Arrive(int rank, Op op, Clock::time_point deadline) {
    std::unique_lock<std::mutex> lk(mu_);
    if (!broken_.ok()) return broken_;
    here_[rank] = true;
    const uint64_t gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      std::fill(here_.begin(), here_.end(), false);
      ++generation_;
      cv_.notify_all();
      return Status::Ok();
    }
    while (generation_ == gen && broken_.ok()) {
      if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && generation_ == gen && broken_.ok()) {
        std::string missing;
        for (int r = 0; r < n_; ++r)
          if (!here_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        broken_ = Status(StatusCode::kDeadlineExceeded,
                         std::string("inproc ") + OpName(op) + ": rank(s) " + missing + " did not arrive within " +
                             std::to_string(options_.timeout.count()) + " ms (world size " +
                             std::to_string(n_) + ", noticed by rank " + std::to_string(rank) + ")");
        cv_.notify_all();
      }
    }
    return generation_ != gen ? Status::Ok() : broken_;
  }

  Status Send(int src, int dst, const void* data, int64_t bytes) {
    const auto deadline = Deadline();
    std::unique_lock<std::mutex> lk(mu_);
    Mailbox& m = mail_[static_cast<size_t>(src) * n_ + dst];
    if (!broken_.ok()) return broken_;
    m.data = data;
    m.bytes = bytes;
    m.full = true;
    cv_.notify_all();
    while (m.full && broken_.ok()) {
      if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && m.full && broken_.ok()) {
        broken_ = Status(StatusCode::kDeadlineExceeded,
                         "inproc send: rank " + std::to_string(dst) + " did not receive from rank " +
                             std::to_string(src) + " within " + std::to_string(options_.timeout.count()) + " ms");
        cv_.notify_all();
      }
    }
    m.full = false;
    return broken_;
  }

  Status Recv(int src, int dst, void* data, int64_t bytes) {
    const auto deadline = Deadline();
    std::unique_lock<std::mutex> lk(mu_);
    Mailbox& m = mail_[static_cast<size_t>(src) * n_ + dst];
    while (!m.full && broken_.ok()) {
      if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && !m.full && broken_.ok()) {
        broken_ = Status(StatusCode::kDeadlineExceeded,
                         "inproc recv: rank " + std::to_string(src) + " did not send to rank " +
                             std::to_string(dst) + " within " + std::to_string(options_.timeout.count()) + " ms");
        cv_.notify_all();
      }
    }
    if (!broken_.ok()) return broken_;
    if (m.bytes != bytes) {
      broken_ = InvalidArgument("inproc recv: rank " + std::to_string(src) + " sent " + std::to_string(m.bytes) +
                                " bytes, rank " + std::to_string(dst) + " expected " + std::to_string(bytes));
      cv_.notify_all();
      return broken_;
    }
    if (bytes > 0) std::memcpy(data, m.data, static_cast<size_t>(bytes));
    m.full = false;
    cv_.notify_all();
    return Status::Ok();
  }

 private:
  const int n_;
  const InProcessOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<bool> here_;
  Status broken_;
  std::vector<Post> posts_;  // written by its rank before phase 1, read by all after it
  std::vector<uint8_t> scratch_;
  std::vector<Mailbox> mail_;
};

namespace {

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(InProcessGroupState* g, int rank) : g_(g), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return g_->n(); }
  std::string_view backend() const override { return "inproc"; }

  Status AllReduce(const void* send, void* recv, int64_t count, DType dtype) override {
    RETURN_IF_ERROR(Begin(CheckSumDType(dtype, "inproc all_reduce")));
    const size_t esize = static_cast<size_t>(DTypeSize(dtype));
    g_->GrowScratch(static_cast<size_t>(count) * esize);
    const auto deadline = g_->Deadline();
    RETURN_IF_ERROR(Phase(MakePost(Op::kAllReduce, send, recv, count, dtype), deadline));
    const int n = g_->n();
    const int64_t begin = SliceBegin(count, n, rank_), len = SliceCount(count, n, rank_);
    std::vector<const void*> parts(n);
    for (int r = 0; r < n; ++r) parts[r] = static_cast<const uint8_t*>(g_->post(r).send) + begin * esize;
    SumInRankOrder(parts, g_->scratch().data() + begin * esize, len, dtype);
    RETURN_IF_ERROR(g_->Arrive(rank_, Op::kAllReduce, deadline));
    if (count > 0) std::memcpy(recv, g_->scratch().data(), static_cast<size_t>(count) * esize);
    return g_->Arrive(rank_, Op::kAllReduce, deadline);
  }

  Status AllGather(const void* send, void* recv, int64_t count, DType dtype) override {
    RETURN_IF_ERROR(Begin(CheckPlain(dtype)));
    const auto deadline = g_->Deadline();
    RETURN_IF_ERROR(Phase(MakePost(Op::kAllGather, send, recv, count, dtype), deadline));
    const size_t bytes = static_cast<size_t>(count * DTypeSize(dtype));
    for (int r = 0; r < g_->n(); ++r)
      if (bytes > 0) std::memcpy(static_cast<uint8_t*>(recv) + r * bytes, g_->post(r).send, bytes);
    return g_->Arrive(rank_, Op::kAllGather, deadline);
  }

  Status ReduceScatter(const void* send, void* recv, int64_t count, DType dtype) override {
    RETURN_IF_ERROR(Begin(CheckSumDType(dtype, "inproc reduce_scatter")));
    const auto deadline = g_->Deadline();
    RETURN_IF_ERROR(Phase(MakePost(Op::kReduceScatter, send, recv, count, dtype), deadline));
    const size_t block = static_cast<size_t>(count * DTypeSize(dtype));
    std::vector<const void*> parts(g_->n());
    for (int r = 0; r < g_->n(); ++r) parts[r] = static_cast<const uint8_t*>(g_->post(r).send) + rank_ * block;
    SumInRankOrder(parts, recv, count, dtype);
    return g_->Arrive(rank_, Op::kReduceScatter, deadline);
  }

  Status AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                   std::span<const int64_t> recv_counts, DType dtype) override {
    const int n = g_->n();
    Status arg = CheckPlain(dtype);
    if (arg.ok() && (static_cast<int>(send_counts.size()) != n || static_cast<int>(recv_counts.size()) != n))
      arg = InvalidArgument("inproc all_to_all_v: rank " + std::to_string(rank_) + " passed " +
                            std::to_string(send_counts.size()) + "/" + std::to_string(recv_counts.size()) +
                            " counts for world size " + std::to_string(n));
    RETURN_IF_ERROR(Begin(arg));
    const auto deadline = g_->Deadline();
    Post p = MakePost(Op::kAllToAllV, send, recv, 0, dtype);
    p.send_counts.assign(send_counts.begin(), send_counts.end());
    p.recv_counts.assign(recv_counts.begin(), recv_counts.end());
    RETURN_IF_ERROR(Phase(p, deadline));
    for (int a = 0; a < n; ++a)  // every rank checks every pair: all agree on failure
      for (int b = 0; b < n; ++b)
        if (g_->post(a).send_counts[b] != g_->post(b).recv_counts[a]) {
          Status s = InvalidArgument("inproc all_to_all_v: rank " + std::to_string(a) + " sends " +
                                     std::to_string(g_->post(a).send_counts[b]) + " elements to rank " +
                                     std::to_string(b) + " which expects " +
                                     std::to_string(g_->post(b).recv_counts[a]));
          g_->Break(s);
          return s;
        }
    const int64_t esize = DTypeSize(dtype);
    int64_t out = 0;
    for (int src = 0; src < n; ++src) {
      const Post& sp = g_->post(src);
      int64_t in = 0;
      for (int q = 0; q < rank_; ++q) in += sp.send_counts[q];
      const int64_t c = recv_counts[src];
      if (c > 0)
        std::memcpy(static_cast<uint8_t*>(recv) + out * esize, static_cast<const uint8_t*>(sp.send) + in * esize,
                    static_cast<size_t>(c * esize));
      out += c;
    }
    return g_->Arrive(rank_, Op::kAllToAllV, deadline);
  }

  Status Broadcast(void* buf, int64_t count, DType dtype, int root) override {
    Status arg = CheckPlain(dtype);
    if (arg.ok() && (root < 0 || root >= g_->n()))
      arg = InvalidArgument("inproc broadcast: root " + std::to_string(root) + " out of range");
    RETURN_IF_ERROR(Begin(arg));
    const auto deadline = g_->Deadline();
    Post p = MakePost(Op::kBroadcast, buf, buf, count, dtype);
    p.root = root;
    RETURN_IF_ERROR(Phase(p, deadline));
    if (rank_ != root && count > 0)
      std::memcpy(buf, g_->post(root).send, static_cast<size_t>(count * DTypeSize(dtype)));
    return g_->Arrive(rank_, Op::kBroadcast, deadline);
  }

  Status Send(const void* buf, int64_t count, DType dtype, int peer) override {
    RETURN_IF_ERROR(Begin(CheckPeer(dtype, peer, "send")));
    return g_->Send(rank_, peer, buf, count * DTypeSize(dtype));
  }
  Status Recv(void* buf, int64_t count, DType dtype, int peer) override {
    RETURN_IF_ERROR(Begin(CheckPeer(dtype, peer, "recv")));
    return g_->Recv(peer, rank_, buf, count * DTypeSize(dtype));
  }

  Status Barrier() override {
    RETURN_IF_ERROR(g_->Broken());
    return g_->Arrive(rank_, Op::kBarrier, g_->Deadline());
  }

 private:
  // Argument errors are local (the caller's bug) but the peers would wait for this
  // rank forever, so they break the group too.
  Status Begin(Status arg) {
    RETURN_IF_ERROR(g_->Broken());
    if (!arg.ok()) g_->Break(arg);
    return arg;
  }
  static Status CheckPlain(DType dtype) {
    return IsQuantized(dtype) ? InvalidArgument("inproc: block-quantized dtypes cannot be exchanged")
                              : Status::Ok();
  }
  Status CheckPeer(DType dtype, int peer, const char* op) const {
    RETURN_IF_ERROR(CheckPlain(dtype));
    if (peer < 0 || peer >= g_->n() || peer == rank_)
      return InvalidArgument(std::string("inproc ") + op + ": peer " + std::to_string(peer) + " invalid for rank " +
                             std::to_string(rank_) + " of " + std::to_string(g_->n()));
    return Status::Ok();
  }
  // Posts this rank's arguments, waits for all, and checks that every rank called
  // the same collective with the same count/dtype (each rank checks all: they agree).
  Status Phase(const Post& p, Clock::time_point deadline) {
    g_->post(rank_) = p;
    RETURN_IF_ERROR(g_->Arrive(rank_, p.op, deadline));
    const Post& p0 = g_->post(0);
    for (int r = 1; r < g_->n(); ++r) {
      const Post& q = g_->post(r);
      if (q.op != p0.op || q.count != p0.count || q.dtype != p0.dtype || q.root != p0.root) {
        Status s = InvalidArgument(std::string("inproc: rank ") + std::to_string(r) + " called " + OpName(q.op) +
                                   "(count " + std::to_string(q.count) + ", " + std::string(DTypeName(q.dtype)) +
                                   ") while rank 0 called " + OpName(p0.op) + "(count " +
                                   std::to_string(p0.count) + ", " + std::string(DTypeName(p0.dtype)) + ")");
        g_->Break(s);
        return s;
      }
    }
    return Status::Ok();
  }

  InProcessGroupState* g_;
  const int rank_;
};

}  // namespace

StatusOr<std::unique_ptr<InProcessGroup>> InProcessGroup::Create(int world_size, InProcessOptions options) {
  if (world_size < 1) return InvalidArgument("inproc: world size must be >= 1, got " + std::to_string(world_size));
  if (options.timeout.count() <= 0) return InvalidArgument("inproc: timeout must be positive");
  std::unique_ptr<InProcessGroup> g(new InProcessGroup());
  g->state_ = std::make_unique<InProcessGroupState>(world_size, options);
  for (int r = 0; r < world_size; ++r) g->comms_.push_back(std::make_unique<InProcessCommunicator>(g->state_.get(), r));
  return g;
}

InProcessGroup::~InProcessGroup() = default;

}  // namespace tessera::parallel

