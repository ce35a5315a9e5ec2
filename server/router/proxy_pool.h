// ProxyPool: the router's bound on proxied work (docs/architecture.md,
// "Router"). At most `max_pending` requests are held at once (parsing, queued
// or running; beyond it the front answers 429 with Retry-After, as an instance
// does past --max-pending-requests), and they run on at most `workers`
// threads, started on demand and kept: a request waits in the queue while
// every worker is busy. So the router's thread count is bounded by its flags,
// never by its clients.
//
// Thread safety: every method may be called from any thread. The destructor
// stops taking jobs, lets the queued and running ones finish and joins the
// workers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera {

struct ProxyPoolOptions {
  int64_t max_pending = 1024;  // --max-pending-requests
  int workers = 256;           // --router-workers
};

class ProxyPool {
 public:
  // One held place among max_pending; released when its last copy goes.
  using Slot = std::shared_ptr<void>;

  explicit ProxyPool(ProxyPoolOptions options);
  ~ProxyPool();
  ProxyPool(const ProxyPool&) = delete;
  ProxyPool& operator=(const ProxyPool&) = delete;

  // A place for one request, or null when max_pending are held (counted in
  // rejected()).
  Slot TryAcquire();
  // Runs `job` on a worker; `slot` is released once the job has returned.
  void Submit(Slot slot, std::function<void()> job);

  // Requests held (admitted and not yet finished).
  int64_t pending() const;
  // Jobs running on a worker now.
  int64_t running() const;
  // Requests refused because max_pending were held, since start.
  int64_t rejected() const;
  // Worker threads started so far (at most options.workers).
  int threads() const;

 private:
  struct State;
  void WorkerLoop();

  const ProxyPoolOptions options_;
  std::shared_ptr<State> state_;  // shared with slots, which may outlive the pool
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  std::vector<std::thread> workers_;         // guarded by mu_
  int idle_ = 0;                             // guarded by mu_
  int64_t running_ = 0;                      // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
};

}  // namespace tessera
