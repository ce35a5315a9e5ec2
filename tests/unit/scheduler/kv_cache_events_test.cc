// The prefix cache's event hook (scheduler/kv_cache_events.h) and cache_salt's
// namespaces (block_hash.h: an extra key of the first block), on the KV
// manager without a model.
#include "scheduler/kv_cache_events.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/kv_cache_manager.h"

namespace tessera {
namespace {

struct Recorded {
  std::string kind;  // "stored" | "removed" | "cleared"
  std::optional<BlockHash> parent;
  std::vector<BlockHash> hashes;
  std::vector<int32_t> tokens;
};

class RecordingSink final : public KvCacheEventSink {
 public:
  void OnBlocksStored(std::optional<BlockHash> parent, std::span<const BlockHash> hashes,
                      std::span<const int32_t> token_ids, int32_t block_size) override {
    EXPECT_EQ(token_ids.size(), hashes.size() * static_cast<size_t>(block_size));
    events.push_back({"stored", parent, {hashes.begin(), hashes.end()}, {token_ids.begin(), token_ids.end()}});
  }
  void OnBlocksRemoved(std::span<const BlockHash> hashes) override {
    events.push_back({"removed", std::nullopt, {hashes.begin(), hashes.end()}, {}});
  }
  void OnAllBlocksCleared() override { events.push_back({"cleared", std::nullopt, {}, {}}); }
  std::vector<Recorded> events;
};

std::vector<int32_t> Iota(int n, int start) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

struct Fixture {
  explicit Fixture(int32_t blocks) {
    KvCacheOptions o{blocks, 4, true};
    o.event_sink = sink;
    kv = std::move(KvCacheManager::Create(o)).value();
  }
  // Admits `tokens` as `seq` (with its prefix hit), computes and caches them all.
  void Run(SeqId seq, const std::vector<int32_t>& tokens, std::string_view salt = "") {
    std::vector<BlockHash> h;
    BlockHashScheme().ExtendBlockHashes(tokens, 4, {}, std::string(salt), &h);
    PrefixHit hit = kv->FindCachedPrefix(h, static_cast<int64_t>(tokens.size()));
    std::vector<CopyOp> copies;
    ASSERT_TRUE(kv->AllocateSlots(seq, hit.num_tokens, static_cast<int64_t>(tokens.size()) - hit.num_tokens, 0, &hit,
                                  &copies));
    kv->CacheComputedBlocks(seq, h, static_cast<int64_t>(tokens.size()), tokens);
    hashes[seq] = h;
  }
  std::shared_ptr<RecordingSink> sink = std::make_shared<RecordingSink>();
  std::unique_ptr<KvCacheManager> kv;
  std::map<SeqId, std::vector<BlockHash>> hashes;
};

TEST(KvCacheEventsTest, StoresCarryParentAndTokensAndSkipHits) {
  Fixture f(16);
  const auto a = Iota(10, 1);  // 2 full blocks + 2
  f.Run(1, a);
  ASSERT_EQ(f.sink->events.size(), 1u);
  const Recorded& s = f.sink->events[0];
  EXPECT_EQ(s.kind, "stored");
  EXPECT_FALSE(s.parent);
  EXPECT_EQ(s.hashes, f.hashes[1]);
  EXPECT_EQ(s.tokens, std::vector<int32_t>(a.begin(), a.begin() + 8));

  // B shares A's first block: only its second is stored, chained onto A's first.
  auto b = a;
  b[6] = 99;
  f.Run(2, b);
  ASSERT_EQ(f.sink->events.size(), 2u);
  const Recorded& s2 = f.sink->events[1];
  ASSERT_EQ(s2.hashes.size(), 1u);
  EXPECT_EQ(s2.hashes[0], f.hashes[2][1]);
  EXPECT_EQ(s2.parent, f.hashes[1][0]);
  EXPECT_EQ(s2.tokens, std::vector<int32_t>(b.begin() + 4, b.begin() + 8));

  // Without tokens nothing is reported (and the blocks are still cached).
  std::vector<BlockHash> h;
  const auto c = Iota(8, 500);
  BlockHashScheme().ExtendBlockHashes(c, 4, {}, "", &h);
  PrefixHit none;
  std::vector<CopyOp> copies;
  ASSERT_TRUE(f.kv->AllocateSlots(3, 0, 8, 0, &none, &copies));
  f.kv->CacheComputedBlocks(3, h, 8);
  EXPECT_EQ(f.sink->events.size(), 2u);
  EXPECT_TRUE(f.kv->pool().Lookup(h[0]).has_value());
}

TEST(KvCacheEventsTest, EvictionsAndResetsAreReported) {
  Fixture f(4);
  f.Run(1, Iota(8, 1));  // blocks 0, 1 cached
  f.kv->Free(1);
  f.sink->events.clear();
  f.Run(2, Iota(16, 100));  // needs all 4 blocks: evicts both cached ones
  std::vector<BlockHash> removed;
  for (const auto& e : f.sink->events) {
    if (e.kind == "removed") removed.insert(removed.end(), e.hashes.begin(), e.hashes.end());
  }
  ASSERT_EQ(removed.size(), 2u);
  EXPECT_TRUE(std::find(removed.begin(), removed.end(), f.hashes[1][0]) != removed.end());
  EXPECT_TRUE(std::find(removed.begin(), removed.end(), f.hashes[1][1]) != removed.end());

  // A reset while blocks are in use drops only free ones (BlockRemoved); once
  // nothing cached is in use it is AllBlocksCleared.
  f.sink->events.clear();
  f.kv->mutable_pool().ResetPrefixCache();
  EXPECT_TRUE(f.sink->events.empty());  // all 4 cached blocks are held by seq 2
  f.kv->Free(2);
  f.kv->mutable_pool().ResetPrefixCache();
  ASSERT_EQ(f.sink->events.size(), 1u);
  EXPECT_EQ(f.sink->events[0].kind, "cleared");
}

TEST(KvCacheEventsTest, CacheSaltSeparatesChains) {
  const auto a = Iota(8, 1);

  Fixture f(16);
  f.Run(1, a, "tenant-a");
  std::vector<BlockHash> same, other, plain;
  BlockHashScheme().ExtendBlockHashes(a, 4, {}, std::string("tenant-a"), &same);
  BlockHashScheme().ExtendBlockHashes(a, 4, {}, std::string("tenant-b"), &other);
  BlockHashScheme().ExtendBlockHashes(a, 4, {}, "", &plain);
  EXPECT_EQ(f.kv->FindCachedPrefix(same, 9).blocks.size(), 2u);
  EXPECT_TRUE(f.kv->FindCachedPrefix(other, 9).blocks.empty());
  EXPECT_TRUE(f.kv->FindCachedPrefix(plain, 9).blocks.empty());
  // Every block of the chain differs, not just the first.
  EXPECT_NE(same[1], plain[1]);
  // The salt is never published: a salted first block reports no parent.
  EXPECT_FALSE(f.sink->events[0].parent);
}

}  // namespace
}  // namespace tessera
