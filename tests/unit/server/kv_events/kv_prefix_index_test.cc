#include "server/kv_events/kv_prefix_index.h"

#include <gtest/gtest.h>

namespace tessera::kv_events {
namespace {

HashKey K(int i) { return KeyOfInt(i); }

EventBatch Stored(std::vector<int> keys, std::optional<std::string> medium = std::nullopt) {
  BlockStored s;
  for (int k : keys) s.block_hashes.push_back(K(k));
  s.block_size = 16;
  s.medium = std::move(medium);
  return {0, {s}, 0};
}

EventBatch Removed(std::vector<int> keys, std::optional<std::string> medium = std::nullopt) {
  BlockRemoved r;
  for (int k : keys) r.block_hashes.push_back(K(k));
  r.medium = std::move(medium);
  return {0, {r}, 0};
}

int64_t MatchedOf(const std::vector<InstanceMatch>& m, const std::string& name) {
  for (const auto& x : m) {
    if (x.instance == name) return x.matched_blocks;
  }
  return -1;
}

TEST(KvPrefixIndex, CountsLeadingBlocksPerInstance) {
  KvPrefixIndex idx;
  idx.Apply("a", Stored({1, 2, 3}));
  idx.Apply("b", Stored({1, 2}));
  idx.Apply("c", Stored({2, 3}));  // holds later blocks but not the first: no prefix
  const std::vector<HashKey> q = {K(1), K(2), K(3), K(4)};
  auto m = idx.Match(q);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].instance, "a");  // most matched first
  EXPECT_EQ(MatchedOf(m, "a"), 3);
  EXPECT_EQ(MatchedOf(m, "b"), 2);
  EXPECT_EQ(MatchedOf(m, "c"), 0);
  EXPECT_EQ(idx.num_entries(), 7);
}

TEST(KvPrefixIndex, RemovedBlockCutsThePrefix) {
  KvPrefixIndex idx;
  idx.Apply("a", Stored({1, 2, 3}));
  idx.Apply("a", Removed({2}));
  const std::vector<HashKey> q = {K(1), K(2), K(3)};
  EXPECT_EQ(MatchedOf(idx.Match(q), "a"), 1);
  EXPECT_EQ(idx.num_entries(), 2);
}

TEST(KvPrefixIndex, MediumsAreTrackedSeparately) {
  KvPrefixIndex idx;
  idx.Apply("a", Stored({1}, "GPU"));
  idx.Apply("a", Stored({1}, "CPU"));
  idx.Apply("a", Removed({1}, "GPU"));  // still in the CPU tier
  const std::vector<HashKey> q = {K(1)};
  EXPECT_EQ(MatchedOf(idx.Match(q), "a"), 1);
  idx.Apply("a", Removed({1}, "CPU"));
  EXPECT_EQ(MatchedOf(idx.Match(q), "a"), 0);
  // A null medium is vLLM's primary pool, "GPU".
  idx.Apply("a", Stored({1}));
  idx.Apply("a", Removed({1}, "GPU"));
  EXPECT_EQ(MatchedOf(idx.Match(q), "a"), 0);
  EXPECT_EQ(idx.num_entries(), 0);
}

TEST(KvPrefixIndex, AllBlocksClearedAndInstanceRemoval) {
  KvPrefixIndex idx;
  idx.Apply("a", Stored({1, 2}));
  idx.Apply("b", Stored({1, 2}));
  idx.Apply("a", EventBatch{0, {AllBlocksCleared{}}, 0});
  const std::vector<HashKey> q = {K(1), K(2)};
  EXPECT_EQ(MatchedOf(idx.Match(q), "a"), 0);
  EXPECT_EQ(MatchedOf(idx.Match(q), "b"), 2);
  idx.RemoveInstance("b");
  auto m = idx.Match(q);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].instance, "a");
  EXPECT_EQ(idx.num_entries(), 0);
  // A new instance reuses the freed slot without inheriting anything.
  idx.AddInstance("c");
  EXPECT_EQ(MatchedOf(idx.Match(q), "c"), 0);
  EXPECT_EQ(idx.instances(), (std::vector<std::string>{"a", "c"}));
}

TEST(KvPrefixIndex, MemoryIsBoundedPerInstance) {
  KvPrefixIndex idx({.max_blocks_per_instance = 4});
  idx.Apply("a", Stored({1, 2, 3, 4}));
  idx.Apply("a", Stored({1}));        // re-stored: now the most recent
  idx.Apply("a", Stored({5, 6}));     // drops 2 and 3, the least recently stored
  EXPECT_EQ(idx.num_entries(), 4);
  const std::vector<HashKey> q = {K(1), K(2)};
  EXPECT_EQ(MatchedOf(idx.Match(q), "a"), 1);
  const std::vector<HashKey> q2 = {K(4), K(5), K(6)};
  EXPECT_EQ(MatchedOf(idx.Match(q2), "a"), 3);
}

TEST(KvPrefixIndex, MatchesTesseraChains) {
  KvPrefixIndex idx;
  std::vector<BlockHash> chain;
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  BlockHashScheme().ExtendBlockHashes(tokens, 4, {}, "", &chain);
  BlockStored s;
  s.block_hashes = {KeyOf(chain[0])};
  s.block_size = 4;
  idx.Apply("a", {0, {s}, 0});
  EXPECT_EQ(MatchedOf(idx.Match(std::span<const BlockHash>(chain)), "a"), 1);
}

}  // namespace
}  // namespace tessera::kv_events
