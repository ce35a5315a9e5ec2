// KvPuller: runs a decode instance's KV pulls (KvTransport::Pull) on one
// thread of its own, so the engine loop keeps stepping running requests while
// a request's prompt KV arrives. The loop Submits a spec, keeps the
// destination blocks out of every batch, and applies each answer from
// TakeDone on its own thread.
//
// Pulls (and releases of exports the decode will not pull) run one at a time,
// in submission order, on the puller's thread: it is the only thread that
// calls KvTransport::Pull (and so UcxAgent::Get) and KvTransport::Release.
//
// Threading: Submit/TakeDone/Stop from the owner's thread (the engine loop);
// `notify` runs on the puller's thread after each answer is queued.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"
#include "engine/kv_transfer/kv_transport.h"

namespace tessera {

class KvPuller {
 public:
  struct Done {
    uint64_t id = 0;  // as submitted
    StatusOr<KvPullStats> result = Status(StatusCode::kCancelled, "kv transfer: not run");
  };

  // `transport` must outlive the puller. `notify` (may be empty): an answer
  // is ready for TakeDone; cheap, non-blocking.
  KvPuller(KvTransport* transport, std::function<void()> notify);
  ~KvPuller();  // Stop()

  // Queues a pull. spec.local_blocks are written by the puller's thread until
  // its answer is taken: the caller must neither read nor free them before.
  void Submit(uint64_t id, KvPullSpec spec);
  // Queues an acknowledgement of an export this instance will not pull
  // (KvTransport::Release, up to 2 s on a dead peer): no answer.
  void Release(std::string host, int port, std::string handle);
  // Answers since the last call (the destination blocks are the caller's again).
  std::vector<Done> TakeDone();
  // Lets the pull in progress end (bounded by the transport's pull timeout),
  // answers queued ones CANCELLED without running them, drops queued
  // releases (the peers free those blocks at their pin timeout), and joins.
  // TakeDone then returns every answer not yet taken. Idempotent.
  void Stop();

 private:
  struct Job {
    uint64_t id = 0;
    KvPullSpec spec;
    bool release = false;  // a Release of spec.host:spec.port, spec.handle; no answer
  };
  void ThreadMain();

  KvTransport* const transport_;
  const std::function<void()> notify_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;   // guarded by mu_
  std::vector<Done> done_;  // guarded by mu_
  bool stop_ = false;       // guarded by mu_
  std::thread thread_;
};

}  // namespace tessera
