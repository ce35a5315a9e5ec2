// In-process ranks: N threads of one process, one Communicator each, exchanging
// data through shared memory. Collectives are two or three barrier phases: every
// rank posts its buffers, then reads the others' directly (no copies through
// queues), then waits until all have finished reading before returning.
// AllReduce: rank r sums slice r over ranks 0..N-1 in order into a shared scratch
// (reduce.h), then every rank copies the whole result out.
//
// Thread safety: communicator(r) is used by rank r's thread only. The group owns
// the communicators and must outlive every call on them.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "engine/parallel/communicator.h"

namespace tessera::parallel {

struct InProcessOptions {
  // Bound on every blocking call: a rank that does not arrive within it fails the
  // call on the others (DEADLINE_EXCEEDED naming the missing ranks).
  std::chrono::milliseconds timeout{30000};
};

class InProcessGroupState;  // inproc.cc

class InProcessGroup {
 public:
  static StatusOr<std::unique_ptr<InProcessGroup>> Create(int world_size, InProcessOptions options = {});
  ~InProcessGroup();

  int world_size() const { return static_cast<int>(comms_.size()); }
  Communicator& communicator(int rank) { return *comms_.at(rank); }

 private:
  InProcessGroup() = default;
  std::unique_ptr<InProcessGroupState> state_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

}  // namespace tessera::parallel
