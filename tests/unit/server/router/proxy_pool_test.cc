// The router's bound on proxied work: at most max_pending held, at most
// `workers` threads whatever the load, queued jobs run as workers free up,
// and a slot is released only when its job is done.
#include "server/router/proxy_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace tessera {
namespace {

using namespace std::chrono_literals;

// A gate the jobs wait on until the test opens it.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> waiting{0};
  void Wait() {
    std::unique_lock<std::mutex> lock(mu);
    ++waiting;
    cv.wait(lock, [this] { return open; });
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

template <typename Pred>
bool WaitFor(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

TEST(ProxyPoolTest, BoundsHeldRequestsAndThreads) {
  Gate gate;
  std::atomic<int> done{0};
  ProxyPool pool({.max_pending = 6, .workers = 2});
  for (int i = 0; i < 6; ++i) {
    ProxyPool::Slot slot = pool.TryAcquire();
    ASSERT_NE(slot, nullptr) << i;
    pool.Submit(std::move(slot), [&] {
      gate.Wait();
      ++done;
    });
  }
  // Six held: the seventh is refused and counted; two run, four queue.
  EXPECT_EQ(pool.TryAcquire(), nullptr);
  EXPECT_EQ(pool.rejected(), 1);
  EXPECT_EQ(pool.pending(), 6);
  ASSERT_TRUE(WaitFor([&] { return gate.waiting.load() == 2; }));
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(gate.waiting.load(), 2);
  EXPECT_EQ(pool.running(), 2);
  EXPECT_EQ(pool.threads(), 2);
  gate.Open();
  ASSERT_TRUE(WaitFor([&] { return done.load() == 6 && pool.pending() == 0; }));
  EXPECT_EQ(pool.threads(), 2);
  // Places free again.
  ProxyPool::Slot again = pool.TryAcquire();
  EXPECT_NE(again, nullptr);
}

// A burst never queues behind a running job while the cap allows threads,
// even when a worker was idle when it came.
TEST(ProxyPoolTest, BurstGetsAWorkerEach) {
  ProxyPool pool({.max_pending = 8, .workers = 4});
  std::atomic<bool> warm{false};
  pool.Submit(pool.TryAcquire(), [&] { warm = true; });
  ASSERT_TRUE(WaitFor([&] { return warm.load() && pool.pending() == 0; }));
  Gate gate;
  for (int i = 0; i < 3; ++i) pool.Submit(pool.TryAcquire(), [&] { gate.Wait(); });
  EXPECT_TRUE(WaitFor([&] { return gate.waiting.load() == 3; }));
  EXPECT_EQ(pool.threads(), 3);
  gate.Open();
}

TEST(ProxyPoolTest, SlotHeldUntilTheJobReturnsAndThrowingJobsFreeIt) {
  ProxyPool pool({.max_pending = 1, .workers = 1});
  Gate gate;
  ProxyPool::Slot slot = pool.TryAcquire();
  ASSERT_NE(slot, nullptr);
  pool.Submit(std::move(slot), [&] { gate.Wait(); });
  ASSERT_TRUE(WaitFor([&] { return gate.waiting.load() == 1; }));
  EXPECT_EQ(pool.TryAcquire(), nullptr);
  gate.Open();
  ASSERT_TRUE(WaitFor([&] { return pool.pending() == 0; }));
  slot = pool.TryAcquire();
  ASSERT_NE(slot, nullptr);
  pool.Submit(std::move(slot), [] { throw std::runtime_error("boom"); });
  ASSERT_TRUE(WaitFor([&] { return pool.pending() == 0; }));
  // The worker survived the throw.
  std::atomic<bool> ran{false};
  pool.Submit(pool.TryAcquire(), [&] { ran = true; });
  EXPECT_TRUE(WaitFor([&] { return ran.load(); }));
  EXPECT_EQ(pool.threads(), 1);
}

TEST(ProxyPoolTest, DestructorFinishesQueuedJobs) {
  std::atomic<int> done{0};
  {
    ProxyPool pool({.max_pending = 16, .workers = 2});
    for (int i = 0; i < 16; ++i) {
      pool.Submit(pool.TryAcquire(), [&] {
        std::this_thread::sleep_for(1ms);
        ++done;
      });
    }
  }
  EXPECT_EQ(done.load(), 16);
}

}  // namespace
}  // namespace tessera
