// RedisKvStore against a real redis-server (Debian's) that each test starts on
// 127.0.0.1 on a free port and stops by PID. Skips when redis-server is not
// installed (scripts/bootstrap installs it).
#include "engine/kv_tiers/redis_kv_store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdlib>
#include <thread>

#include "engine/kv_tiers/async_kv_store.h"
#include "tests/unit/engine/kv_tiers/redis_server.h"

namespace tessera::kv_tiers {
namespace {

using Clock = std::chrono::steady_clock;
using testing::FreePort;
using testing::HaveRedis;
using testing::RedisServer;

KvBlockKey Key(uint64_t i, std::string fp = "fp", std::string tenant = "") {
  return {fp, "layout", Sha256Of(std::to_string(i)), tenant};
}
std::string Bytes(uint64_t i, size_t n = 2048) { return std::string(n, static_cast<char>('a' + i % 26)); }

class RedisKvStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveRedis()) GTEST_SKIP() << "redis-server is not installed (scripts/bootstrap)";
    const int port = FreePort();
    ASSERT_GT(port, 0);
    ASSERT_TRUE(server_.Start(port));
    RedisKvStoreOptions o;
    o.port = port;
    o.connect_timeout_ms = 200;
    o.op_timeout_ms = 300;
    o.retry_interval_ms = 100;
    auto s = RedisKvStore::Create(o);
    ASSERT_TRUE(s.ok());
    store_ = std::move(*s);
  }
  RedisServer server_;
  std::shared_ptr<RedisKvStore> store_;
};

TEST_F(RedisKvStoreTest, PutGetContainsDelete) {
  EXPECT_EQ(store_->Get(Key(1)).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store_->Put(Key(1), Bytes(1)).ok());
  EXPECT_TRUE(*store_->Contains(Key(1)));
  EXPECT_EQ(*store_->Get(Key(1)), Bytes(1));
  ASSERT_TRUE(store_->Delete(Key(1)).ok());
  EXPECT_FALSE(*store_->Contains(Key(1)));
  // Keys carry neither the fingerprint nor the tenant in clear.
  const std::string k = store_->RedisKeyOf(Key(1, "secret-model", "tenant-a"));
  EXPECT_EQ(k.find("secret"), std::string::npos);
  EXPECT_EQ(k.find("tenant"), std::string::npos);
}

TEST_F(RedisKvStoreTest, TenantsAndModelsDoNotShareBlocks) {
  ASSERT_TRUE(store_->Put(Key(1, "fp", "tenant-a"), Bytes(1)).ok());
  EXPECT_EQ(store_->Get(Key(1, "fp", "tenant-b")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->Get(Key(1, "other-fp", "tenant-a")).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store_->Get(Key(1, "fp", "tenant-a")).ok());
}

TEST_F(RedisKvStoreTest, CorruptOrForeignValueIsAMissAndIsDropped) {
  // A good record, then overwritten behind the store's back (redis-cli).
  ASSERT_TRUE(store_->Put(Key(1), Bytes(1)).ok());
  const std::string cmd = "redis-cli -p " + std::to_string(server_.port()) + " SET " + store_->RedisKeyOf(Key(1)) +
                          " garbage >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(store_->Get(Key(1)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->stats().corrupt, 1);
  EXPECT_FALSE(*store_->Contains(Key(1)));  // dropped
  // A record of another model stored under this key's name (wrong fingerprint).
  ASSERT_TRUE(store_->Put(Key(2, "model-b"), Bytes(2)).ok());
  const std::string copy = "redis-cli -p " + std::to_string(server_.port()) + " COPY " +
                           store_->RedisKeyOf(Key(2, "model-b")) + " " + store_->RedisKeyOf(Key(2, "model-a")) +
                           " >/dev/null";
  ASSERT_EQ(std::system(copy.c_str()), 0);
  ASSERT_TRUE(*store_->Contains(Key(2, "model-a")));
  EXPECT_EQ(store_->Get(Key(2, "model-a")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store_->stats().corrupt, 2);
}

TEST_F(RedisKvStoreTest, WithASecretUnauthenticatedRecordsAreRejectedAndDropped) {
  RedisKvStoreOptions o;
  o.port = server_.port();
  o.secret = "a deployment secret";
  auto authed = RedisKvStore::Create(o);
  ASSERT_TRUE(authed.ok());
  // Its own records round-trip; one written without the secret (a planted
  // record with valid checksums) is refused, counted as rejected, deleted.
  ASSERT_TRUE((*authed)->Put(Key(1), Bytes(1)).ok());
  EXPECT_EQ(*(*authed)->Get(Key(1)), Bytes(1));
  ASSERT_TRUE(store_->Put(Key(2), Bytes(2)).ok());
  EXPECT_EQ((*authed)->Get(Key(2)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*authed)->stats().rejected, 1);
  EXPECT_EQ((*authed)->stats().corrupt, 0);
  EXPECT_FALSE(*store_->Contains(Key(2)));
}

TEST_F(RedisKvStoreTest, StoppedServerIsUnavailableWithinTheTimeoutThenReconnects) {
  ASSERT_TRUE(store_->Put(Key(1), Bytes(1)).ok());
  server_.Stop();
  const auto t0 = Clock::now();
  auto r = store_->Get(Key(1));
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_EQ(store_->Put(Key(2), Bytes(2)).code(), StatusCode::kUnavailable);
  EXPECT_EQ(store_->Contains(Key(2)).status().code(), StatusCode::kUnavailable);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));  // op + connect timeouts, no hang
  EXPECT_GE(store_->stats().errors, 1);

  // Redis comes back (empty: no persistence) on the same port: used again after the retry interval.
  ASSERT_TRUE(server_.Start(server_.port()));
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  Status put = Status(StatusCode::kUnavailable, "");
  while (Clock::now() < deadline && !(put = store_->Put(Key(3), Bytes(3))).ok()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(put.ok()) << put.ToString();
  EXPECT_EQ(*store_->Get(Key(3)), Bytes(3));
}

TEST_F(RedisKvStoreTest, AsyncPoolNeverBlocksTheCallerAndCompletesEverything) {
  AsyncKvStore async(store_, {.num_workers = 3, .max_pending = 512});
  std::atomic<int> ok{0}, bad{0};
  for (uint64_t i = 0; i < 100; ++i) {
    ASSERT_TRUE(async.Put(Key(i), Bytes(i), [&](Status s) { s.ok() ? ++ok : ++bad; }));
  }
  async.Drain();
  for (uint64_t i = 0; i < 100; ++i) {
    ASSERT_TRUE(async.Get(Key(i), [&, i](StatusOr<std::string> r) { r.ok() && *r == Bytes(i) ? ++ok : ++bad; }));
  }
  async.Drain();
  EXPECT_EQ(ok.load(), 200);
  EXPECT_EQ(bad.load(), 0);

  // Redis stopped mid-run: submits still return at once; gets complete as unavailable.
  server_.Stop();
  std::atomic<int> unavailable{0};
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < 20; ++i) {
    async.Get(Key(i), [&](StatusOr<std::string> r) { unavailable += r.status().code() == StatusCode::kUnavailable; });
  }
  EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(100));  // submitting never waits on Redis
  async.Drain();
  EXPECT_EQ(unavailable.load(), 20);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(3));
}

TEST(AsyncKvStore, FullQueueRefusesAtOnce) {
  // A store whose Put blocks until released: the queue fills, submits fail fast.
  struct Slow final : KvBlockStore {
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;
    Status Put(const KvBlockKey&, std::string_view) override {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return open; });
      return Status::Ok();
    }
    StatusOr<std::string> Get(const KvBlockKey&) override { return NotFound(""); }
    StatusOr<bool> Contains(const KvBlockKey&) override { return false; }
    Status Delete(const KvBlockKey&) override { return Status::Ok(); }
    KvStoreStats stats() const override { return {}; }
    const char* name() const override { return "slow"; }
  };
  auto slow = std::make_shared<Slow>();
  {
    AsyncKvStore async(slow, {.num_workers = 1, .max_pending = 2});
    int accepted = 0;
    for (int i = 0; i < 10; ++i) accepted += async.Put(Key(i), "x");
    EXPECT_LE(accepted, 3);  // one running + two queued
    EXPECT_GE(async.stats().rejected, 7);
    {
      std::lock_guard<std::mutex> l(slow->mu);
      slow->open = true;
    }
    slow->cv.notify_all();
  }
}

}  // namespace
}  // namespace tessera::kv_tiers
