// NCCL for GPUs: one process (or thread) per GPU. Rank 0 creates the unique id and
// publishes it in the rendezvous store; every rank reads it and calls
// ncclCommInitRankConfig in non-blocking mode, so init and every collective can
// be bounded by the timeout: we poll the stream and ncclCommGetAsyncError, and on
// timeout or error abort the communicator (ncclCommAbort) and return the Status.
//
// Buffers are device pointers on the communicator's device. NCCL picks its own
// reduction order (ring/tree): results are deterministic for a fixed world size,
// topology, NCCL version and NCCL_ALGO/NCCL_PROTO, but NOT equal to the CPU
// communicators' rank-order sums, and bf16 is rounded per hop.
//
// Compiled only when CUDA and NCCL are found (TESSERA_HAVE_NCCL).
#pragma once

#include <memory>

#include "engine/parallel/communicator.h"
#include "engine/parallel/rendezvous.h"

namespace tessera::parallel {

// Number of CUDA devices visible (0 without a driver or GPU).
int NcclDeviceCount();

// Joins the rendezvous, exchanges the unique id through its store and creates the
// NCCL communicator on `device`.
StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const RendezvousOptions& rendezvous, int device);

}  // namespace tessera::parallel
