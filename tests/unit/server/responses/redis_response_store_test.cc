// RedisResponseStore against a real redis-server started on a free loopback
// port (skipped when redis-server is not installed), and ResponseStore over
// it: finished responses go to Redis, owners stay apart, records over the cap
// are not written, a stopped Redis is an error (never "not found") for reads
// and a counted skip for writes.
#include "server/responses/redis_response_store.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tests/unit/engine/kv_tiers/redis_server.h"

namespace tessera::responses {
namespace {

using kv_tiers::testing::HaveRedis;
using kv_tiers::testing::RedisServer;

StoredResponse Entry(const std::string& id, const std::string& owner, size_t pad = 0) {
  return {id, owner, Json{{"id", id}, {"status", "completed"}, {"pad", std::string(pad, 'x')}},
          Json::array({Json{{"id", "msg_" + id}}}), Json::array({Json{{"role", "user"}}})};
}

class RedisResponseStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveRedis()) GTEST_SKIP() << "redis-server is not installed (scripts/bootstrap)";
    ASSERT_TRUE(server_.StartOnFreePort());
    RedisResponseStoreOptions o;
    o.url = "redis://127.0.0.1:" + std::to_string(server_.port()) + "/2";
    o.max_record_bytes = 4096;
    o.op_timeout_ms = 300;
    o.retry_interval_ms = 100;
    auto s = RedisResponseStore::Create(o);
    ASSERT_TRUE(s.ok()) << s.status().message();
    redis_ = std::shared_ptr<RedisResponseStore>(std::move(*s));
  }
  RedisServer server_;
  std::shared_ptr<RedisResponseStore> redis_;
};

TEST_F(RedisResponseStoreTest, PutGetDeleteByOwner) {
  ASSERT_TRUE(redis_->Put(Entry("resp_a", "tenant-one")).ok());
  auto got = redis_->Get("resp_a", "tenant-one");
  ASSERT_TRUE(got.ok());
  ASSERT_NE(*got, nullptr);
  EXPECT_EQ((*got)->response["id"], "resp_a");
  EXPECT_EQ((*got)->conversation.size(), 1u);
  EXPECT_EQ(*redis_->Get("resp_a", "tenant-two"), nullptr);
  EXPECT_FALSE(*redis_->Delete("resp_a", "tenant-two"));
  EXPECT_TRUE(*redis_->Delete("resp_a", "tenant-one"));
  EXPECT_EQ(*redis_->Get("resp_a", "tenant-one"), nullptr);
  // Keys name a digest of the owner, never the owner; odd ids never reach Redis.
  EXPECT_EQ(redis_->KeyOf("resp_a", "tenant-one").find("tenant"), std::string::npos);
  EXPECT_EQ(redis_->KeyOf("resp_a\r\nFLUSHALL", "tenant-one"), "");
}

TEST_F(RedisResponseStoreTest, OverTheCapIsRefused) {
  EXPECT_EQ(redis_->Put(Entry("resp_big", "t", 8192)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(*redis_->Get("resp_big", "t"), nullptr);
}

TEST_F(RedisResponseStoreTest, WritesPendingOnWorkersAreServedHereAndFlushed) {
  std::vector<std::function<void()>> queued;  // a worker pool that never runs (stopped at shutdown)
  ResponseStoreOptions o;
  o.shared = redis_;
  o.run_blocking = [&queued](std::function<void()> fn) { queued.push_back(std::move(fn)); };
  ResponseStore one(o);
  ResponseStoreOptions plain;
  plain.shared = redis_;
  ResponseStore two(plain);
  one.Complete(Entry("resp_p", "t"));
  ASSERT_EQ(queued.size(), 1u);
  EXPECT_NE(one.Get("resp_p", "t"), nullptr);  // served by the instance that made it meanwhile
  EXPECT_EQ(two.Get("resp_p", "t"), nullptr);
  one.FlushWrites();
  EXPECT_NE(two.Get("resp_p", "t"), nullptr);
  // Deleted while its write was queued: the write, when it runs, does not bring it back.
  one.Complete(Entry("resp_q", "t"));
  EXPECT_TRUE(one.Delete("resp_q", "t"));
  queued.back()();
  EXPECT_EQ(two.Get("resp_q", "t"), nullptr);
}

TEST_F(RedisResponseStoreTest, SharedThroughResponseStoreAndRedisDown) {
  ResponseStoreOptions o;
  o.shared = redis_;
  ResponseStore one(o), two(o);
  EXPECT_STREQ(one.kind(), "redis");
  one.Begin(Entry("resp_x", "t"), true, nullptr);
  one.Complete(Entry("resp_x", "t"));
  ASSERT_NE(two.Get("resp_x", "t"), nullptr);  // another instance's store reads it
  EXPECT_EQ(two.Get("resp_x", "u"), nullptr);
  Json snapshot;
  EXPECT_EQ(two.Cancel("resp_x", "t", &snapshot), ResponseStore::CancelResult::kNotInProgress);
  EXPECT_TRUE(two.Delete("resp_x", "t"));
  EXPECT_EQ(one.Get("resp_x", "t"), nullptr);

  server_.Stop();
  auto found = two.Find("resp_y", "t");
  EXPECT_EQ(found.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(two.Erase("resp_y", "t").status().code(), StatusCode::kUnavailable);
  one.Complete(Entry("resp_y", "t"));  // the write is skipped and counted
  EXPECT_EQ(one.errors(), 1);
  EXPECT_EQ(two.errors(), 2);
}

}  // namespace
}  // namespace tessera::responses
