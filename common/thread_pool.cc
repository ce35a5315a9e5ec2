#include "common/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>

namespace tessera {
namespace {

// Waking a sleeping thread through a condition variable costs tens of microseconds
// (more under a hypervisor), as much as a whole decode-sized kernel. So workers spin
// briefly for the next job, and the caller for the workers to finish, before
// sleeping. Both spins are bounded, so idle pools still sleep.
constexpr auto kWorkerSpin = std::chrono::microseconds(200);
constexpr auto kCallerSpin = std::chrono::milliseconds(1);
constexpr int kPauseSpinUs = 20;  // then poll with sched_yield

// Chunks per thread: threads claim chunks in turn, so a thread that loses its CPU
// to another process (shared or oversubscribed machines) delays the job by one
// chunk, not by a whole 1/num_threads share. A few per thread is enough for that
// and keeps chunks large (whole cache panels for the GEMM).
constexpr int64_t kChunksPerThread = 4;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until pred() or `limit` has passed; returns pred(). After a few microseconds
// it yields between polls, so that when the machine is oversubscribed a thread of
// this pool waiting for a CPU (possibly this one) gets to run.
template <class Pred>
bool SpinUntil(const Pred& pred, std::chrono::steady_clock::duration limit) {
  const auto start = std::chrono::steady_clock::now();
  const auto pause_until = start + std::chrono::microseconds(kPauseSpinUs);
  const auto deadline = start + limit;
  bool yielding = false;
  for (int i = 0;; ++i) {
    if (pred()) return true;
    if (yielding) {
      std::this_thread::yield();
    } else {
      CpuRelax();
    }
    if ((i & 15) == 15 || yielding) {
      const auto now = std::chrono::steady_clock::now();
      if (now > deadline) return pred();
      yielding = now > pause_until;
    }
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::HardwareThreads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = (n + grain - 1) / grain;
  int64_t chunks = std::min<int64_t>(max_chunks, int64_t{num_threads_} * kChunksPerThread);
  bool inline_run = chunks <= 1 || num_threads_ == 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (busy_) inline_run = true;  // nested call from inside a job
    if (!inline_run) busy_ = true;
  }
  if (inline_run) {
    fn(0, n);
    return;
  }
  Job job;
  job.fn = &fn;
  job.n = n;
  job.chunk = (n + chunks - 1) / chunks;
  job.chunks = (n + job.chunk - 1) / job.chunk;  // no empty chunks
  job.parts = static_cast<int>(std::min<int64_t>(num_threads_, job.chunks));
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = job;
    done_chunks_.store(0);
    generation = generation_.load() + 1;
    claim_.store(generation << 32);
    generation_.store(generation);
  }
  work_cv_.notify_all();
  RunChunks(job, generation);  // the caller is one of the workers
  const auto done = [&] { return done_chunks_.load() == job.chunks; };
  if (!SpinUntil(done, kCallerSpin)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, done);
  }
  std::lock_guard<std::mutex> lock(mu_);
  busy_ = false;
}

void ThreadPool::RunChunks(const Job& job, uint64_t generation) {
  const uint64_t tag = generation << 32;
  uint64_t c = claim_.load();
  for (;;) {
    if ((c & ~uint64_t{0xffffffff}) != tag || static_cast<int64_t>(c & 0xffffffff) >= job.chunks) return;
    if (!claim_.compare_exchange_weak(c, c + 1)) continue;  // c reloaded
    const int64_t begin = static_cast<int64_t>(c & 0xffffffff) * job.chunk;
    (*job.fn)(begin, std::min(job.n, begin + job.chunk));
    if (done_chunks_.fetch_add(1) + 1 == job.chunks) {
      std::lock_guard<std::mutex> lock(mu_);  // so a caller about to sleep cannot miss it
      done_cv_.notify_one();
    }
    c = claim_.load();
  }
}

void ThreadPool::WorkerLoop(int worker_index) {
  uint64_t seen = 0;
  for (;;) {
    const auto next = [&] { return generation_.load() != seen; };
    SpinUntil(next, kWorkerSpin);
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || next(); });
      if (stop_) return;
      seen = generation_.load();
      job = job_;
    }
    if (worker_index < job.parts) RunChunks(job, seen);
  }
}

}  // namespace tessera
