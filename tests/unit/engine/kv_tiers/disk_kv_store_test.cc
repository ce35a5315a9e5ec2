#include "engine/kv_tiers/disk_kv_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "engine/kv_tiers/async_kv_store.h"

namespace tessera::kv_tiers {
namespace {

namespace fs = std::filesystem;

KvBlockKey Key(uint64_t i, std::string fp = "fp") { return {fp, "layout", Sha256Of(std::to_string(i)), ""}; }
std::string Bytes(uint64_t i, size_t n = 4096) { return std::string(n, static_cast<char>('a' + i % 26)); }

class DiskKvStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera_disk_kv_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<DiskKvStore> Open(int64_t max_bytes = 1 << 20) {
    auto s = DiskKvStore::Open({dir_.string(), max_bytes});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  fs::path dir_;
};

TEST_F(DiskKvStoreTest, PutGetContainsDelete) {
  auto s = Open();
  EXPECT_EQ(s->Get(Key(1)).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(s->Put(Key(1), Bytes(1)).ok());
  EXPECT_TRUE(*s->Contains(Key(1)));
  EXPECT_EQ(*s->Get(Key(1)), Bytes(1));
  ASSERT_TRUE(s->Delete(Key(1)).ok());
  EXPECT_FALSE(*s->Contains(Key(1)));
  EXPECT_FALSE(fs::exists(s->PathOf(Key(1))));
}

TEST_F(DiskKvStoreTest, PinnedBlocksOutliveTheLruUntilTheirPinEnds) {
  int64_t now = 100;
  const int64_t record = 4096 + 200;
  auto opened = DiskKvStore::Open({.dir = dir_.string(), .max_bytes = 2 * record, .clock = [&] { return now; }});
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  DiskKvStore& s = **opened;
  ASSERT_TRUE(s.Put(Key(0), Bytes(0, 4096)).ok());
  ASSERT_TRUE(s.Put(Key(1), Bytes(1, 4096)).ok());
  EXPECT_TRUE(s.Pin(Key(0), 500));
  ASSERT_TRUE(s.Put(Key(2), Bytes(2, 4096)).ok());  // evicts 1, not the pinned 0
  EXPECT_TRUE(*s.Contains(Key(0)));
  EXPECT_FALSE(*s.Contains(Key(1)));
  ASSERT_TRUE(s.Pin(Key(2), 500));
  EXPECT_EQ(s.Put(Key(3), Bytes(3, 4096)).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.stats().pinned_blocks, 2);
  now = 500;
  ASSERT_TRUE(s.Put(Key(3), Bytes(3, 4096)).ok());
  EXPECT_FALSE(*s.Contains(Key(0)));
}

TEST_F(DiskKvStoreTest, SurvivesARestartAndKeepsLruOrder) {
  {
    auto s = Open();
    for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(s->Put(Key(i), Bytes(i)).ok());
  }
  auto s = Open();
  EXPECT_EQ(s->stats().blocks_stored, 3);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ(*s->Get(Key(i)), Bytes(i));
}

TEST_F(DiskKvStoreTest, EvictsLeastRecentlyUsedBeyondTheBound) {
  const int64_t record = 4096 + 200;  // a little more than one record of 4096 bytes
  auto s = Open(3 * record);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(s->Put(Key(i), Bytes(i)).ok());
  ASSERT_TRUE(s->Get(Key(0)).ok());  // 0 is now the most recent; 1 the least
  ASSERT_TRUE(s->Put(Key(3), Bytes(3)).ok());
  EXPECT_TRUE(*s->Contains(Key(0)));
  EXPECT_FALSE(*s->Contains(Key(1)));
  EXPECT_FALSE(fs::exists(s->PathOf(Key(1))));
  EXPECT_LE(s->stats().bytes_stored, 3 * record);
  EXPECT_EQ(s->stats().evictions, 1);
  EXPECT_EQ(s->Put(Key(9), std::string(4 * record, 'z')).code(), StatusCode::kResourceExhausted);
}

TEST_F(DiskKvStoreTest, CorruptFileIsAMissAndIsDropped) {
  auto s = Open();
  ASSERT_TRUE(s->Put(Key(1), Bytes(1)).ok());
  {
    std::fstream f(s->PathOf(Key(1)), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-10, std::ios::end);
    f.put('#');
  }
  EXPECT_EQ(s->Get(Key(1)).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s->stats().corrupt, 1);
  EXPECT_FALSE(fs::exists(s->PathOf(Key(1))));
  EXPECT_FALSE(*s->Contains(Key(1)));
}

TEST_F(DiskKvStoreTest, BadFilesAreDroppedOnOpen) {
  std::string path2;
  {
    auto s = Open();
    ASSERT_TRUE(s->Put(Key(1), Bytes(1)).ok());
    ASSERT_TRUE(s->Put(Key(2), Bytes(2)).ok());
    path2 = s->PathOf(Key(2));
  }
  fs::resize_file(path2, 100);  // truncated: header size check fails
  fs::create_directories(dir_ / "ab");
  std::ofstream(dir_ / "ab" / "0123456789abcdef0123456789abcdef.kvb") << "garbage";
  auto s = Open();
  EXPECT_EQ(s->stats().blocks_stored, 1);
  EXPECT_EQ(s->stats().corrupt, 2);
  EXPECT_FALSE(fs::exists(path2));
  EXPECT_TRUE(s->Get(Key(1)).ok());
}

TEST_F(DiskKvStoreTest, WrongFingerprintIsAMiss) {
  auto s = Open();
  ASSERT_TRUE(s->Put(Key(1, "model-a"), Bytes(1)).ok());
  EXPECT_EQ(s->Get(Key(1, "model-b")).status().code(), StatusCode::kNotFound);
  // A record copied under another key's file name (a colliding id) is caught by the key check.
  fs::create_directories(fs::path(s->PathOf(Key(1, "model-b"))).parent_path());
  fs::copy_file(s->PathOf(Key(1, "model-a")), s->PathOf(Key(1, "model-b")));
  auto reopened = Open();
  EXPECT_EQ(reopened->Get(Key(1, "model-b")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(reopened->stats().corrupt, 1);
  EXPECT_EQ(*reopened->Get(Key(1, "model-a")), Bytes(1));
}

TEST_F(DiskKvStoreTest, ConcurrentPutsAndGetsThroughTheAsyncPool) {
  auto store = std::shared_ptr<DiskKvStore>(Open(int64_t{64} << 20));
  AsyncKvStore async(store, {.num_workers = 4, .max_pending = 1024});
  std::atomic<int> ok{0}, bad{0};
  for (uint64_t i = 0; i < 64; ++i) {
    ASSERT_TRUE(async.Put(Key(i), Bytes(i, 1024), [&](Status s) { s.ok() ? ++ok : ++bad; }));
  }
  async.Drain();
  EXPECT_EQ(ok.load(), 64);
  for (int round = 0; round < 2; ++round) {
    for (uint64_t i = 0; i < 64; ++i) {
      ASSERT_TRUE(async.Get(Key(i), [&, i](StatusOr<std::string> r) { r.ok() && *r == Bytes(i, 1024) ? ++ok : ++bad; }));
      ASSERT_TRUE(async.Put(Key(i), Bytes(i, 1024)));  // replaced while others read it
    }
  }
  async.Drain();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(ok.load(), 64 + 128);
  EXPECT_EQ(store->stats().blocks_stored, 64);
}

}  // namespace
}  // namespace tessera::kv_tiers
