#include "engine/parallel/gloo_communicator.h"

#include <signal.h>

#include <cstring>
#include <vector>

#include <gloo/allgatherv.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include "engine/parallel/reduce.h"

namespace tessera::parallel {

namespace {

// Gloo's Store interface over ours; Gloo expects exceptions.
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(parallel::Store* s, std::chrono::milliseconds timeout) : s_(s), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override { Check(s_->Set(key, data)); }
  std::vector<char> get(const std::string& key) override {
    auto v = s_->Get(key, timeout_);
    Check(v.status());
    return std::move(v).value();
  }
  void wait(const std::vector<std::string>& keys) override { Check(s_->Wait(keys, timeout_)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    Check(s_->Wait(keys, std::min(timeout, timeout_)));
  }

 private:
  static void Check(const Status& st) {
    if (!st.ok()) throw gloo::IoException(st.message());
  }
  parallel::Store* s_;
  std::chrono::milliseconds timeout_;
};

constexpr uint8_t kP2pSlotPrefix = 0x40;  // above Gloo's collective prefixes (gloo/types.h)

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::unique_ptr<Rendezvous> rv, std::shared_ptr<gloo::Context> ctx)
      : rv_(std::move(rv)), ctx_(std::move(ctx)), timeout_(rv_->options.timeout),
        send_seq_(ctx_->size, 0), recv_seq_(ctx_->size, 0) {}

  int rank() const override { return ctx_->rank; }
  int world_size() const override { return ctx_->size; }
  std::string_view backend() const override { return "gloo"; }

  Status AllReduce(const void* send, void* recv, int64_t count, DType dtype) override {
    RETURN_IF_ERROR(Ready(CheckSumDType(dtype, "gloo all_reduce")));
    const int n = ctx_->size, me = ctx_->rank;
    const int64_t es = DTypeSize(dtype);
    std::vector<int64_t> out_counts(n), in_counts(n, SliceCount(count, n, me) * es);
    for (int r = 0; r < n; ++r) out_counts[r] = SliceCount(count, n, r) * es;
    std::vector<uint8_t> pieces(static_cast<size_t>(in_counts[0]) * n + 1);
    std::vector<uint8_t> mine(static_cast<size_t>(in_counts[0]) + 1);
    return Run("all_reduce", [&] {
      AllToAllBytes(send, out_counts, pieces.data(), in_counts);
      ReducePieces(pieces.data(), n, mine.data(), SliceCount(count, n, me), dtype);
      gloo::AllgathervOptions o(ctx_);
      o.setInput(mine.data(), static_cast<size_t>(in_counts[0]));
      std::vector<size_t> sizes(out_counts.begin(), out_counts.end());
      o.setOutput(static_cast<uint8_t*>(recv), sizes);
      o.setTag(NextTag());
      o.setTimeout(timeout_);
      gloo::allgatherv(o);
    });
  }

  Status AllGather(const void* send, void* recv, int64_t count, DType dtype) override {
    RETURN_IF_ERROR(Ready(CheckPlain(dtype)));
    const size_t bytes = static_cast<size_t>(count * DTypeSize(dtype));
    return Run("all_gather", [&] {
      gloo::AllgathervOptions o(ctx_);
      o.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(send)), bytes);
      o.setOutput(static_cast<uint8_t*>(recv), std::vector<size_t>(ctx_->size, bytes));
      o.setTag(NextTag());
      o.setTimeout(timeout_);
      gloo::allgatherv(o);
    });
  }

  Status ReduceScatter(const void* send, void* recv, int64_t count, DType dtype) override {
    RETURN_IF_ERROR(Ready(CheckSumDType(dtype, "gloo reduce_scatter")));
    const int n = ctx_->size;
    const int64_t bytes = count * DTypeSize(dtype);
    std::vector<int64_t> counts(n, bytes);
    std::vector<uint8_t> pieces(static_cast<size_t>(bytes) * n + 1);
    return Run("reduce_scatter", [&] {
      AllToAllBytes(send, counts, pieces.data(), counts);
      ReducePieces(pieces.data(), n, recv, count, dtype);
    });
  }

  Status AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                   std::span<const int64_t> recv_counts, DType dtype) override {
    const int n = ctx_->size;
    Status arg = CheckPlain(dtype);
    if (arg.ok() && (static_cast<int>(send_counts.size()) != n || static_cast<int>(recv_counts.size()) != n))
      arg = InvalidArgument("gloo all_to_all_v: rank " + std::to_string(ctx_->rank) + " passed " +
                            std::to_string(send_counts.size()) + "/" + std::to_string(recv_counts.size()) +
                            " counts for world size " + std::to_string(n));
    RETURN_IF_ERROR(Ready(arg));
    const int64_t es = DTypeSize(dtype);
    std::vector<int64_t> sb(n), rb(n);
    for (int r = 0; r < n; ++r) {
      sb[r] = send_counts[r] * es;
      rb[r] = recv_counts[r] * es;
    }
    return Run("all_to_all_v", [&] { AllToAllBytes(send, sb, recv, rb); });
  }

  Status Broadcast(void* buf, int64_t count, DType dtype, int root) override {
    Status arg = CheckPlain(dtype);
    if (arg.ok() && (root < 0 || root >= ctx_->size))
      arg = InvalidArgument("gloo broadcast: root " + std::to_string(root) + " out of range");
    RETURN_IF_ERROR(Ready(arg));
    return Run("broadcast", [&] {
      gloo::BroadcastOptions o(ctx_);
      o.setOutput(static_cast<uint8_t*>(buf), static_cast<size_t>(count * DTypeSize(dtype)));
      o.setRoot(root);
      o.setTag(NextTag());
      o.setTimeout(timeout_);
      gloo::broadcast(o);
    });
  }

  Status Send(const void* buf, int64_t count, DType dtype, int peer) override {
    RETURN_IF_ERROR(Ready(CheckPeer(dtype, peer, "send")));
    return Run("send", [&] {
      auto ub = ctx_->createUnboundBuffer(const_cast<void*>(buf), static_cast<size_t>(count * DTypeSize(dtype)));
      ub->send(peer, gloo::Slot::build(kP2pSlotPrefix, send_seq_[peer]++));
      int r = -1;
      if (!ub->waitSend(&r, timeout_)) throw gloo::IoException("send to rank " + std::to_string(peer) + " aborted");
    }, peer);
  }

  Status Recv(void* buf, int64_t count, DType dtype, int peer) override {
    RETURN_IF_ERROR(Ready(CheckPeer(dtype, peer, "recv")));
    return Run("recv", [&] {
      auto ub = ctx_->createUnboundBuffer(buf, static_cast<size_t>(count * DTypeSize(dtype)));
      ub->recv(peer, gloo::Slot::build(kP2pSlotPrefix, recv_seq_[peer]++));
      int r = -1;
      if (!ub->waitRecv(&r, timeout_)) throw gloo::IoException("recv from rank " + std::to_string(peer) + " aborted");
    }, peer);
  }

  Status Barrier() override {
    RETURN_IF_ERROR(Ready(Status::Ok()));
    return Run("barrier", [&] {
      gloo::BarrierOptions o(ctx_);
      o.setTag(NextTag());
      o.setTimeout(timeout_);
      gloo::barrier(o);
    });
  }

 private:
  Status Ready(Status arg) {
    RETURN_IF_ERROR(broken_);
    return arg;  // argument errors leave the communicator usable: nothing was sent
  }
  static Status CheckPlain(DType dtype) {
    return IsQuantized(dtype) ? InvalidArgument("gloo: block-quantized dtypes cannot be exchanged") : Status::Ok();
  }
  Status CheckPeer(DType dtype, int peer, const char* op) const {
    RETURN_IF_ERROR(CheckPlain(dtype));
    if (peer < 0 || peer >= ctx_->size || peer == ctx_->rank)
      return InvalidArgument(std::string("gloo ") + op + ": peer " + std::to_string(peer) + " invalid for rank " +
                             std::to_string(ctx_->rank) + " of " + std::to_string(ctx_->size));
    return Status::Ok();
  }
  uint32_t NextTag() { return tag_++; }

  // Gloo reports failures as exceptions; they stop here and break the communicator.
  template <typename F>
  Status Run(const char* op, F&& f, int peer = -1) {
    try {
      f();
      return Status::Ok();
    } catch (const std::exception& e) {
      const std::string what = e.what();
      const bool timed_out = what.find("imed out") != std::string::npos || what.find("imeout") != std::string::npos;
      std::string msg = std::string("gloo ") + op + " on rank " + std::to_string(ctx_->rank) + " of " +
                        std::to_string(ctx_->size);
      if (peer >= 0) msg += " (peer rank " + std::to_string(peer) + ")";
      msg += timed_out ? ": a peer did not take part within " + std::to_string(timeout_.count()) + " ms"
                       : ": a peer failed or exited";
      const std::string gone = DescribeGoneRanks(*rv_, std::chrono::milliseconds(timed_out ? 0 : 500));
      if (!gone.empty()) msg += " (" + gone + ")";
      broken_ = Status(timed_out ? StatusCode::kDeadlineExceeded : StatusCode::kUnavailable, msg + ": " + what);
      return broken_;
    }
  }

  // Byte all-to-all-v: out_bytes[p] from `send` (rank order) to rank p, in_bytes[p]
  // from rank p into `recv` (rank order).
  void AllToAllBytes(const void* send, const std::vector<int64_t>& out_bytes, void* recv,
                     const std::vector<int64_t>& in_bytes) {
    gloo::AlltoallvOptions o(ctx_);
    o.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(send)), out_bytes);
    o.setOutput(static_cast<uint8_t*>(recv), in_bytes);
    o.setTag(NextTag());
    o.setTimeout(timeout_);
    gloo::alltoallv(o);
  }

  // pieces holds n consecutive blocks of `count` elements, block r from rank r.
  static void ReducePieces(const uint8_t* pieces, int n, void* out, int64_t count, DType dtype) {
    std::vector<const void*> parts(n);
    for (int r = 0; r < n; ++r) parts[r] = pieces + r * count * DTypeSize(dtype);
    SumInRankOrder(parts, out, count, dtype);
  }

  std::unique_ptr<Rendezvous> rv_;  // keeps the store (and on rank 0 its server) alive
  std::shared_ptr<gloo::Context> ctx_;
  const std::chrono::milliseconds timeout_;
  uint32_t tag_ = 1;
  std::vector<uint32_t> send_seq_, recv_seq_;
  Status broken_;
};

}  // namespace

namespace {

void IgnoreSigpipeIfDefault() {
  struct sigaction old{};
  if (::sigaction(SIGPIPE, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) return;
  struct sigaction ign{};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  ::sigaction(SIGPIPE, &ign, nullptr);
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const RendezvousOptions& rendezvous,
                                                               const GlooOptions& options) {
  ASSIGN_OR_RETURN(auto rv, JoinRendezvous(rendezvous));
  const RendezvousOptions& o = rv->options;
  std::string host = options.hostname;
  if (host.empty() && (o.leader_host == "127.0.0.1" || o.leader_host == "localhost")) host = "127.0.0.1";
  // Gloo's TCP pairs write with writev, which raises SIGPIPE when a peer has died
  // between its last read and our write; at the default disposition that kills this
  // rank instead of failing the collective. Process-wide, set once, and only when
  // nobody chose a disposition: every write here already checks for EPIPE.
  IgnoreSigpipeIfDefault();
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;  // empty: Gloo resolves this host's name
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(o.rank, o.world_size);
    ctx->setTimeout(o.timeout);
    GlooStoreAdapter adapter(rv->store.get(), o.timeout);
    gloo::rendezvous::PrefixStore prefixed(o.group + "/gloo", adapter);
    ctx->connectFullMesh(prefixed, device);
    return std::unique_ptr<Communicator>(new GlooCommunicator(std::move(rv), std::move(ctx)));
  } catch (const std::exception& e) {
    return Status(StatusCode::kUnavailable, "gloo: rank " + std::to_string(o.rank) + " of " +
                                                std::to_string(o.world_size) + " could not connect the mesh: " +
                                                e.what());
  }
}

}  // namespace tessera::parallel
