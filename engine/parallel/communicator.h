// Communicator: the collectives a parallel engine needs (tensor parallelism:
// all-reduce, all-gather, reduce-scatter; expert parallelism: all-to-all with
// per-rank counts; plan broadcast, point-to-point, barrier), behind one interface
// with three implementations:
//   InProcessGroup      ranks are threads of one process sharing memory (inproc.h)
//   GlooCommunicator    one process per rank, Gloo over TCP (gloo_communicator.h)
//   NcclCommunicator    one process per GPU, NCCL on device buffers (nccl_communicator.h)
//
// Contract shared by all implementations:
// - Every rank of the group calls the same collectives in the same order with the
//   same count/dtype (all-to-all-v: counts that agree pairwise). A mismatch the
//   implementation can see is an error naming the rank.
// - Every blocking call is bounded by the group's timeout: a rank that is dead,
//   missing or stuck makes the others return a non-OK Status (DEADLINE_EXCEEDED or
//   UNAVAILABLE, naming the rank or peer where known) instead of hanging.
// - After a failed call the communicator is broken: every later call returns the
//   first error at once (the peers may be mid-operation; nothing can be resumed).
// - Sums (AllReduce, ReduceScatter) of f32 and bf16. The in-process and Gloo
//   implementations add the ranks' values in rank order 0..N-1 per element, in f32
//   (bf16 is rounded once, at the end), so results are bitwise reproducible and
//   equal across these two implementations and a serial loop. NCCL chooses its own
//   order (ring/tree, per-hop bf16 rounding); it is deterministic run to run only at
//   a fixed world size, topology and NCCL_ALGO/NCCL_PROTO (see README.md).
// - Buffers: host memory for in-process and Gloo; device memory for NCCL (calls
//   return after the communicator's stream has finished the operation).
// - One thread calls a given Communicator at a time (it is not thread-safe).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/dtype.h"
#include "common/status.h"

namespace tessera::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "inproc", "gloo" or "nccl".
  virtual std::string_view backend() const = 0;

  // recv[i] = sum over ranks r (in order 0..N-1 where the library allows) of
  // send_r[i], i < count. dtype kF32 or kBF16. send == recv is allowed (in place).
  virtual Status AllReduce(const void* send, void* recv, int64_t count, DType dtype) = 0;
  // recv holds world_size * count elements; rank r's send lands at r * count.
  virtual Status AllGather(const void* send, void* recv, int64_t count, DType dtype) = 0;
  // send holds world_size * count elements; rank r receives the sum of block r
  // (elements [r * count, (r + 1) * count)) over all ranks. dtype kF32 or kBF16.
  virtual Status ReduceScatter(const void* send, void* recv, int64_t count, DType dtype) = 0;
  // send_counts[p] elements go to rank p (blocks laid out in rank order in send);
  // recv_counts[p] elements arrive from rank p (in rank order in recv). Rank p's
  // send_counts[q] must equal rank q's recv_counts[p]. Counts may be zero.
  virtual Status AllToAllV(const void* send, std::span<const int64_t> send_counts, void* recv,
                           std::span<const int64_t> recv_counts, DType dtype) = 0;
  // root's buf is copied to every rank's buf.
  virtual Status Broadcast(void* buf, int64_t count, DType dtype, int root) = 0;
  // Point-to-point. Send blocks until the matching Recv on `peer` is posted
  // (in-process, Gloo and NCCL alike), so a ring of Sends must not all start
  // first; an unmatched Send fails after the timeout. Sends from one rank to one peer are
  // received in order.
  virtual Status Send(const void* buf, int64_t count, DType dtype, int peer) = 0;
  virtual Status Recv(void* buf, int64_t count, DType dtype, int peer) = 0;
  virtual Status Barrier() = 0;
};

// Elements of rank r's slice when `count` elements are split over `world` ranks:
// the first count % world ranks get one more. Slices are contiguous, in rank order.
inline int64_t SliceCount(int64_t count, int world, int r) {
  return count / world + (r < count % world ? 1 : 0);
}
inline int64_t SliceBegin(int64_t count, int world, int r) {
  return r * (count / world) + std::min<int64_t>(r, count % world);
}

}  // namespace tessera::parallel
