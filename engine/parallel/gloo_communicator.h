// Gloo over TCP: one process per rank. Ranks rendezvous through the
// store of rendezvous.h, then Gloo connects a full mesh of TCP pairs through it
// (gloo::rendezvous::Context::connectFullMesh with a PrefixStore over our store).
//
// Collectives map onto Gloo's: AllGather -> allgatherv, AllToAllV -> alltoallv,
// Broadcast -> broadcast, Barrier -> barrier, Send/Recv -> unbound buffers.
// Sums do NOT use Gloo's ring all-reduce, whose per-chunk addition order depends on
// the ring position: AllReduce = alltoallv (rank r receives slice r of every rank)
// + SumInRankOrder + allgatherv, ReduceScatter = alltoallv + SumInRankOrder. Same
// bytes on the wire as a ring (2(n-1)/n and (n-1)/n of the buffer per rank) and the
// same bits as the in-process group.
//
// Every Gloo call gets the timeout; a dead peer closes its sockets, so the others
// fail at once (UNAVAILABLE) or, when only waiting on a survivor, at the timeout
// (DEADLINE_EXCEEDED).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "engine/parallel/communicator.h"
#include "engine/parallel/rendezvous.h"

namespace tessera::parallel {

struct GlooOptions {
  // Address this rank's Gloo pairs listen on; empty: 127.0.0.1 when the leader is
  // on loopback, else this host's name (as Gloo resolves it).
  std::string hostname;
};

// Joins the rendezvous (rendezvous.h) and connects the Gloo mesh. The timeout of
// `rendezvous` bounds the join and every later call. Sets SIGPIPE to ignored if it
// is at the default (a dead peer must fail a collective, not kill this process).
StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const RendezvousOptions& rendezvous,
                                                               const GlooOptions& options = {});

}  // namespace tessera::parallel
