// AsyncKvStore: a KvBlockStore behind a bounded queue and a few worker
// threads, so the engine loop hands off spills and loads and never waits on
// disk or Redis. Submitting never blocks: when the queue is full the call
// returns false at once (the caller recomputes, or skips the spill).
//
// Completion callbacks run on a worker thread; they must be short and
// thread-safe (e.g. post the result into the engine loop's inbox). Every
// accepted operation's callback runs exactly once, also on shutdown (the
// destructor finishes what is queued). Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/kv_tiers/kv_block_store.h"

namespace tessera::kv_tiers {

struct AsyncKvStoreOptions {
  int num_workers = 2;
  int64_t max_pending = 256;  // queued operations beyond which submits are refused
};

struct AsyncKvStoreStats {
  int64_t submitted = 0;
  int64_t rejected = 0;  // queue full
  int64_t completed = 0;
  int64_t pending = 0;
};

class AsyncKvStore {
 public:
  using PutDone = std::function<void(Status)>;
  using GetDone = std::function<void(StatusOr<std::string>)>;
  using ContainsDone = std::function<void(StatusOr<bool>)>;

  AsyncKvStore(std::shared_ptr<KvBlockStore> store, AsyncKvStoreOptions options = {});
  ~AsyncKvStore();  // runs what is queued, then joins the workers

  // False (and `done` is never called) when the queue is full.
  bool Put(KvBlockKey key, std::string bytes, PutDone done = {});
  bool Get(KvBlockKey key, GetDone done);
  bool Contains(KvBlockKey key, ContainsDone done);

  // Blocks until the queue is empty and no operation runs (tests, shutdown).
  void Drain();

  AsyncKvStoreStats stats() const;
  KvBlockStore& store() { return *store_; }

 private:
  bool Submit(std::function<void()> op);
  void Work();

  std::shared_ptr<KvBlockStore> store_;
  AsyncKvStoreOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // work or stop
  std::condition_variable idle_cv_;  // queue empty and nothing running
  std::deque<std::function<void()>> queue_;
  int running_ = 0;
  bool stop_ = false;
  AsyncKvStoreStats stats_;
  std::vector<std::thread> workers_;
};

}  // namespace tessera::kv_tiers
