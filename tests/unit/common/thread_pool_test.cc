#include "common/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace tessera {
namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

Ranges CollectRanges(ThreadPool& pool, int64_t n, int64_t grain) {
  std::mutex mu;
  Ranges ranges;
  pool.ParallelFor(n, grain, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    ranges.emplace_back(b, e);
  });
  std::sort(ranges.begin(), ranges.end());
  return ranges;
}

TEST(ThreadPoolTest, RangesCoverExactlyOnce) {
  for (int threads : {1, 2, 3, 4, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000, 1001}) {
      for (int64_t grain : {0, 1, 3, 100, 5000}) {
        std::vector<std::atomic<int>> hits(n);
        for (auto& h : hits) h = 0;
        int calls = 0;
        std::mutex mu;
        pool.ParallelFor(n, grain, [&](int64_t b, int64_t e) {
          ASSERT_LT(b, e);
          for (int64_t i = b; i < e; ++i) hits[i]++;
          std::lock_guard<std::mutex> lock(mu);
          ++calls;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 1) << n << " " << grain << " " << i;
        EXPECT_LE(calls, 4 * threads);  // at most 4 chunks per thread
        if (n > 0 && grain >= n) {
          EXPECT_EQ(calls, 1);  // too small to split
        }
      }
    }
  }
}

TEST(ThreadPoolTest, PartitionIsDeterministic) {
  ThreadPool pool(4);
  const Ranges first = CollectRanges(pool, 1003, 10);
  EXPECT_EQ(first.size(), 16u);  // 4 per thread, 63 items each (the last 58)
  EXPECT_EQ(first.front().first, 0);
  EXPECT_EQ(first.back().second, 1003);
  for (size_t i = 1; i < first.size(); ++i) EXPECT_EQ(first[i - 1].second, first[i].first);
  for (int rep = 0; rep < 50; ++rep) ASSERT_EQ(CollectRanges(pool, 1003, 10), first);
  ThreadPool other(4);  // depends on (n, grain, threads) only
  EXPECT_EQ(CollectRanges(other, 1003, 10), first);
}

TEST(ThreadPoolTest, RunsOnSeveralThreads) {
  ThreadPool pool(2);
  std::mutex mu;
  std::set<std::thread::id> ids;
  // Chunks slow enough that the worker claims some before the caller runs out.
  pool.ParallelFor(8, 1, [&](int64_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_TRUE(ids.count(std::this_thread::get_id()));  // the caller is one of the workers
}

// A thread that stalls (here: the worker sleeps in every chunk it takes, as if
// another process held its CPU) delays the job by its current chunk only: the
// other thread takes the remaining chunks.
TEST(ThreadPoolTest, StalledThreadDelaysOneChunkOnly) {
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> by_caller{0}, by_worker{0};
  pool.ParallelFor(8, 1, [&](int64_t b, int64_t e) {
    EXPECT_EQ(e - b, 1);
    if (std::this_thread::get_id() == caller) {
      ++by_caller;
    } else {
      ++by_worker;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  EXPECT_EQ(by_caller + by_worker, 8);
  EXPECT_GE(by_caller.load(), 6);  // a static half/half split would give the caller 4
}

TEST(ThreadPoolTest, NestedCallsRunInline) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(30 * 40);
  for (auto& h : hits) h = 0;
  pool.ParallelFor(30, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const std::thread::id self = std::this_thread::get_id();
      pool.ParallelFor(40, 1, [&](int64_t b2, int64_t e2) {
        EXPECT_EQ(std::this_thread::get_id(), self);  // inline on the calling thread
        for (int64_t j = b2; j < e2; ++j) hits[i * 40 + j]++;
      });
    }
  });
  for (auto& h : hits) ASSERT_EQ(h, 1);
  // The pool is usable in parallel again afterwards.
  EXPECT_EQ(CollectRanges(pool, 9, 1).size(), 9u);
}

TEST(ThreadPoolTest, ManyRepeatedCalls) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int rep = 0; rep < 20000; ++rep) {
    const int64_t n = 1 + rep % 7;
    pool.ParallelFor(n, 1, [&](int64_t b, int64_t e) { total += e - b; });
  }
  int64_t expect = 0;
  for (int rep = 0; rep < 20000; ++rep) expect += 1 + rep % 7;
  EXPECT_EQ(total.load(), expect);
}

// Workers spin briefly after a job, then sleep: both wake-up paths must work.
TEST(ThreadPoolTest, WakesAfterIdle) {
  ThreadPool pool(2);
  for (int rep = 0; rep < 6; ++rep) {
    if (rep % 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(CollectRanges(pool, 10, 1).size(), 5u);  // 8 chunks wanted, 2 items each
  }
}

TEST(ThreadPoolTest, AlternatingPartCounts) {
  // Workers idle in one job (index >= parts) must still join the next one.
  ThreadPool pool(4);
  for (int rep = 0; rep < 2000; ++rep) {
    const int64_t n = rep % 2 ? 2 : 4;
    std::atomic<int64_t> sum{0};
    pool.ParallelFor(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum += i + 1;
    });
    ASSERT_EQ(sum.load(), n * (n + 1) / 2);
  }
}

TEST(ThreadPoolTest, HardwareThreadsAndSingleThreadPool) {
  EXPECT_GE(ThreadPool::HardwareThreads(), 1);
  ThreadPool pool(0);  // clamps to 1: everything inline
  EXPECT_EQ(pool.num_threads(), 1);
  const std::thread::id self = std::this_thread::get_id();
  pool.ParallelFor(100, 1, [&](int64_t b, int64_t e) {
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 100);
    EXPECT_EQ(std::this_thread::get_id(), self);
  });
}

TEST(ThreadPoolTest, DestroyWhileIdle) {
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(3);
    if (i % 2) pool.ParallelFor(10, 1, [](int64_t, int64_t) {});
  }
}

}  // namespace
}  // namespace tessera
