// A fixed pool of worker threads for data-parallel kernels.
//
// ParallelFor splits [0, n) into contiguous chunks (up to 4 per thread) that the
// calling thread and the workers claim in turn, returning when all chunks are done.
// The caller never waits for a worker that has not started: on a shared or
// oversubscribed machine a worker without a CPU costs nothing (the caller runs the
// chunks), and one descheduled mid-job delays only its current chunk.
// Chunk boundaries depend only on (n, grain, num_threads), never on timing (only
// which thread runs a chunk does), so kernels that partition by output element
// stay bitwise deterministic. Thread safety: one ParallelFor at a time per
// pool (the engine loop is single-threaded); nested calls run inline.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera {

class ThreadPool {
 public:
  // num_threads counts the caller: 1 means everything runs inline.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) over disjoint ranges covering [0, n), at most
  // 4 * num_threads() of them, on any threads of the pool. `grain` is the smallest
  // range worth handing to another thread.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Number of hardware threads available to this process (sched affinity aware).
  static int HardwareThreads();

 private:
  struct Job {
    const std::function<void(int64_t, int64_t)>* fn = nullptr;
    int64_t n = 0, chunk = 0, chunks = 0;
    int parts = 0;  // threads woken for it (caller included)
  };
  void WorkerLoop(int worker_index);
  // Claims and runs chunks of job `generation` until none is left or a newer job
  // has started. `job` is valid while any of its chunks is unclaimed or running.
  void RunChunks(const Job& job, uint64_t generation);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  Job job_;                              // guarded by mu_
  std::atomic<uint64_t> generation_{0};  // bumped (under mu_) once per parallel job
  // (generation mod 2^32) << 32 | next chunk index: a claim succeeds only for the
  // job it was meant for, so a worker waking late never touches a finished job.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> done_chunks_{0};
  bool stop_ = false;  // guarded by mu_
  bool busy_ = false;  // guarded by mu_: a job is running (nested calls run inline)
};

}  // namespace tessera
