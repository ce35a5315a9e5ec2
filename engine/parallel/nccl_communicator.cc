#include "engine/parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace tessera::parallel {

namespace {

using Clock = std::chrono::steady_clock;

bool NcclType(DType d, ncclDataType_t* out) {
  switch (d) {
    case DType::kF32: *out = ncclFloat32; return true;
    case DType::kF16: *out = ncclFloat16; return true;
    case DType::kBF16: *out = ncclBfloat16; return true;
    case DType::kI32: *out = ncclInt32; return true;
    case DType::kI64: *out = ncclInt64; return true;
    default: return false;
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<Rendezvous> rv, ncclComm_t comm, cudaStream_t stream, int device)
      : rv_(std::move(rv)), comm_(comm), stream_(stream), device_(device),
        rank_(rv_->options.rank), world_(rv_->options.world_size), timeout_(rv_->options.timeout) {}
  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (broken_.ok()) ncclCommDestroy(comm_);  // an aborted comm is already freed
    if (scratch_ != nullptr) cudaFree(scratch_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string_view backend() const override { return "nccl"; }

  Status AllReduce(const void* send, void* recv, int64_t count, DType dtype) override {
    ncclDataType_t t;
    RETURN_IF_ERROR(Args("all_reduce", dtype, &t, true));
    return Finish("all_reduce", ncclAllReduce(send, recv, static_cast<size_t>(count), t, ncclSum, comm_, stream_));
  }
  Status AllGather(const void* send, void* recv, int64_t count, DType dtype) override {
    ncclDataType_t t;
    RETURN_IF_ERROR(Args("all_gather", dtype, &t, false));
    return Finish("all_gather", ncclAllGather(send, recv, static_cast<size_t>(count), t, comm_, stream_));
  }
  Status ReduceScatter(const void* send, void* recv, int64_t count, DType dtype) override {
    ncclDataType_t t;
    RETURN_IF_ERROR(Args("reduce_scatter", dtype, &t, true));
    return Finish("reduce_scatter",
                  ncclReduceScatter(send, recv, static_cast<size_t>(count), t, ncclSum, comm_, stream_));
  }
  Status AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                   std::span<const int64_t> recv_counts, DType dtype) override {
    ncclDataType_t t;
    RETURN_IF_ERROR(Args("all_to_all_v", dtype, &t, false));
    if (static_cast<int>(send_counts.size()) != world_ || static_cast<int>(recv_counts.size()) != world_)
      return InvalidArgument("nccl all_to_all_v: counts do not match world size " + std::to_string(world_));
    const size_t es = static_cast<size_t>(DTypeSize(dtype));
    ncclResult_t rc = ncclGroupStart();
    size_t so = 0, ro = 0;
    for (int p = 0; p < world_ && rc == ncclSuccess; ++p) {
      if (send_counts[p] > 0)
        rc = ncclSend(static_cast<const char*>(send) + so * es, static_cast<size_t>(send_counts[p]), t, p, comm_,
                      stream_);
      if (rc == ncclSuccess && recv_counts[p] > 0)
        rc = ncclRecv(static_cast<char*>(recv) + ro * es, static_cast<size_t>(recv_counts[p]), t, p, comm_, stream_);
      so += static_cast<size_t>(send_counts[p]);
      ro += static_cast<size_t>(recv_counts[p]);
    }
    ncclResult_t end = ncclGroupEnd();
    return Finish("all_to_all_v", rc != ncclSuccess ? rc : end);
  }
  Status Broadcast(void* buf, int64_t count, DType dtype, int root) override {
    ncclDataType_t t;
    RETURN_IF_ERROR(Args("broadcast", dtype, &t, false));
    if (root < 0 || root >= world_) return InvalidArgument("nccl broadcast: root out of range");
    return Finish("broadcast", ncclBroadcast(buf, buf, static_cast<size_t>(count), t, root, comm_, stream_));
  }
  Status Send(const void* buf, int64_t count, DType dtype, int peer) override {
    ncclDataType_t t;
    RETURN_IF_ERROR(Args("send", dtype, &t, false));
    if (peer < 0 || peer >= world_ || peer == rank_) return InvalidArgument("nccl send: invalid peer");
    return Finish("send", ncclSend(buf, static_cast<size_t>(count), t, peer, comm_, stream_), peer);
  }
  Status Recv(void* buf, int64_t count, DType dtype, int peer) override {
    ncclDataType_t t;
    RETURN_IF_ERROR(Args("recv", dtype, &t, false));
    if (peer < 0 || peer >= world_ || peer == rank_) return InvalidArgument("nccl recv: invalid peer");
    return Finish("recv", ncclRecv(buf, static_cast<size_t>(count), t, peer, comm_, stream_), peer);
  }
  Status Barrier() override {
    // NCCL has no barrier: a one-element all-reduce on a device scratch word.
    RETURN_IF_ERROR(broken_);
    cudaSetDevice(device_);
    if (scratch_ == nullptr && cudaMalloc(&scratch_, sizeof(float)) != cudaSuccess)
      return Internal("nccl barrier: cudaMalloc failed");
    return Finish("barrier", ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_));
  }

 private:
  Status Args(const char* op, DType dtype, ncclDataType_t* t, bool sum) {
    RETURN_IF_ERROR(broken_);
    if (!NcclType(dtype, t) || (sum && dtype != DType::kF32 && dtype != DType::kBF16))
      return InvalidArgument(std::string("nccl ") + op + ": dtype " + std::string(DTypeName(dtype)) +
                             " not supported");
    cudaSetDevice(device_);
    return Status::Ok();
  }

  // Waits for the enqueued operation within the timeout; aborts the comm on failure.
  Status Finish(const char* op, ncclResult_t rc, int peer = -1) {
    const auto start = Clock::now(), deadline = start + timeout_;
    std::string what;
    StatusCode code = StatusCode::kUnavailable;
    for (;;) {
      if (rc != ncclSuccess && rc != ncclInProgress) {
        what = ncclGetErrorString(rc);
        break;
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        what = ncclGetErrorString(async);
        break;
      }
      cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess && async == ncclSuccess) return Status::Ok();
      if (q != cudaSuccess && q != cudaErrorNotReady) {
        what = cudaGetErrorString(q);
        break;
      }
      if (Clock::now() >= deadline) {
        what = "not complete within " + std::to_string(timeout_.count()) + " ms (a peer is dead or missing)";
        code = StatusCode::kDeadlineExceeded;
        break;
      }
      rc = ncclSuccess;
      // Spin briefly (small collectives finish in microseconds), then back off.
      if (Clock::now() - start < std::chrono::milliseconds(2)) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    std::string msg = std::string("nccl ") + op + " on rank " + std::to_string(rank_) + " of " +
                      std::to_string(world_);
    if (peer >= 0) msg += " (peer rank " + std::to_string(peer) + ")";
    const std::string gone = DescribeGoneRanks(*rv_, std::chrono::milliseconds(0));
    if (!gone.empty()) msg += " (" + gone + ")";
    broken_ = Status(code, msg + ": " + what);
    ncclCommAbort(comm_);
    return broken_;
  }

  std::unique_ptr<Rendezvous> rv_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  const int device_, rank_, world_;
  const std::chrono::milliseconds timeout_;
  void* scratch_ = nullptr;
  Status broken_;
};

}  // namespace

int NcclDeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const RendezvousOptions& rendezvous, int device) {
  if (device < 0 || device >= NcclDeviceCount())
    return Status(StatusCode::kUnavailable, "nccl: no CUDA device " + std::to_string(device));
  ASSIGN_OR_RETURN(auto rv, JoinRendezvous(rendezvous));
  const RendezvousOptions& o = rv->options;
  const std::string key = o.group + "/nccl/unique_id";
  ncclUniqueId id;
  if (o.rank == 0) {
    if (ncclGetUniqueId(&id) != ncclSuccess) return Internal("nccl: ncclGetUniqueId failed");
    RETURN_IF_ERROR(rv->store->Set(key, std::vector<char>(id.internal, id.internal + sizeof(id.internal))));
  } else {
    ASSIGN_OR_RETURN(auto bytes, rv->store->Get(key, o.timeout));
    if (bytes.size() != sizeof(id.internal)) return DataLoss("nccl: malformed unique id in the rendezvous store");
    std::copy(bytes.begin(), bytes.end(), id.internal);
  }
  if (cudaSetDevice(device) != cudaSuccess) return Internal("nccl: cudaSetDevice failed");
  cudaStream_t stream;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
    return Internal("nccl: cudaStreamCreate failed");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init and collectives return ncclInProgress; we poll with a deadline
  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclCommInitRankConfig(&comm, o.world_size, id, o.rank, &config);
  const auto deadline = Clock::now() + o.timeout;
  while (rc == ncclInProgress || rc == ncclSuccess) {
    ncclResult_t state = ncclInProgress;
    ncclCommGetAsyncError(comm, &state);
    if (state == ncclSuccess) break;
    if (state != ncclInProgress) {
      rc = state;
      break;
    }
    if (Clock::now() >= deadline) {
      ncclCommAbort(comm);
      cudaStreamDestroy(stream);
      return Status(StatusCode::kDeadlineExceeded, "nccl: rank " + std::to_string(o.rank) + " of " +
                                                       std::to_string(o.world_size) + ": init not complete within " +
                                                       std::to_string(o.timeout.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (rc != ncclSuccess && rc != ncclInProgress) {
    if (comm != nullptr) ncclCommAbort(comm);
    cudaStreamDestroy(stream);
    return Status(StatusCode::kUnavailable, std::string("nccl: init failed on rank ") + std::to_string(o.rank) + ": " +
                                                ncclGetErrorString(rc));
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(rv), comm, stream, device));
}

}  // namespace tessera::parallel
