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

// generation_ and pending_ are read without the mutex while spinning, so every
// access to them goes through std::atomic_ref (the header keeps plain members).
static_assert(alignof(uint64_t) >= std::atomic_ref<uint64_t>::required_alignment);
static_assert(alignof(int) >= std::atomic_ref<int>::required_alignment);

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
  int parts = static_cast<int>(std::min<int64_t>(num_threads_, (n + grain - 1) / grain));
  bool inline_run = parts <= 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (busy_) inline_run = true;  // nested call from inside a job
    if (!inline_run) busy_ = true;
  }
  if (inline_run) {
    fn(0, n);
    return;
  }
  const int64_t chunk = (n + parts - 1) / parts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunk_ = chunk;
    job_parts_ = parts;
    std::atomic_ref<int>(pending_).store(parts - 1);
    std::atomic_ref<uint64_t>(generation_).fetch_add(1);
  }
  work_cv_.notify_all();
  fn(0, std::min(n, chunk));  // part 0 on the caller
  const auto done = [this] { return std::atomic_ref<int>(pending_).load() == 0; };
  SpinUntil(done, kCallerSpin);
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, done);
  job_ = nullptr;
  busy_ = false;
}

void ThreadPool::WorkerLoop(int worker_index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t begin, end;
    const auto next = [&] { return std::atomic_ref<uint64_t>(generation_).load() != seen; };
    SpinUntil(next, kWorkerSpin);
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || next(); });
      if (stop_) return;
      seen = std::atomic_ref<uint64_t>(generation_).load();
      if (worker_index >= job_parts_) continue;
      job = job_;
      begin = worker_index * job_chunk_;
      end = std::min(job_n_, begin + job_chunk_);
    }
    if (begin < end) (*job)(begin, end);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (std::atomic_ref<int>(pending_).fetch_sub(1) == 1) done_cv_.notify_one();
    }
  }
}

}  // namespace tessera
