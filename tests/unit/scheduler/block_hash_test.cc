// Block hashes are vLLM's (vllm/v1/core/kv_cache_utils.py hash_block_tokens
// with vllm/utils/hashing.py sha256 / sha256_cbor), so KV events, tiers and
// routers agree with vLLM's. The golden digests were computed with CPython
// 3.11's pickle and hashlib, NONE_HASH as vLLM's with PYTHONHASHSEED=0:
//   sha256 = lambda x: hashlib.sha256(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)).digest()
//   none = sha256("0"); b0 = sha256((none, (1, 2, 3, 4), None)); ...
// and, for sha256_cbor (no cbor2 at hand), from the RFC 8949 encodings
// written out byte by byte in the test.
#include "scheduler/block_hash.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace tessera {
namespace {

std::string Hex(const BlockHash& h) { return ToHex(h.digest); }

TEST(BlockHashTest, Sha256IsVllmsPickleHash) {
  const BlockHashScheme s(PrefixHashAlgo::kSha256);
  EXPECT_EQ(Hex(s.none_hash()), "1973e23848344dc43a988a9b478663803cfffe1243480253f9a3cf004b14aa7c");
  std::vector<BlockHash> chain;
  s.ExtendBlockHashes(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}, 4, {}, "", &chain);
  ASSERT_EQ(chain.size(), 2u);
  EXPECT_EQ(Hex(chain[0]), "762b2e7e1520febd3a0aedb7358e8602facf3924440e18538fce057e23bae91d");
  EXPECT_EQ(Hex(chain[1]), "9e62b5a7ec298f33cb4c7d9e00b659874bb2432d23ad6879ad1746592a2b036b");
  // cache_salt is an extra key of the first block only: (salt,).
  std::vector<BlockHash> salted;
  s.ExtendBlockHashes(std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}, 4, {}, "tenant-a", &salted);
  ASSERT_EQ(salted.size(), 2u);
  EXPECT_EQ(Hex(salted[0]), "447f6aef2176044ce29e90a4f8bb4439e0678fd0f39591a6677266b66e1ed34a");
  EXPECT_EQ(Hex(salted[1]), "8795cc92ae1736ef015bdd7c0549163d961d926d5843ecf8d29d19f20003b1f9");
}

TEST(BlockHashTest, Sha256PicklesEveryIntWidthStringsAndFrames) {
  const BlockHashScheme s(PrefixHashAlgo::kSha256);
  // (none, (0, 255, 256, 65535, 65536, 2**31-1), (7, 2**31, 2**63+5, "x"*300)):
  // BININT1/2/4, LONG1 of 5 and 9 bytes, BINUNICODE, a MARK'd tuple.
  const std::vector<int32_t> tokens = {0, 255, 256, 65535, 65536, 2147483647};
  const uint64_t keys[] = {7, uint64_t{1} << 31, (uint64_t{1} << 63) + 5};
  const std::string salt(300, 'x');
  EXPECT_EQ(Hex(s.HashBlock(s.none_hash(), tokens, keys, &salt)),
            "4b957b4a8bb1346872101f238ba8648203a85795bf5d73acdcca660fc01bb2fd");
  // 21834 tokens: the pickle spans two 64 KiB frames, split where CPython splits.
  const std::vector<int32_t> big(21834, 1000);
  EXPECT_EQ(Hex(s.HashBlock(s.none_hash(), big, {})),
            "3dbdfcb2fc1b10bac272d699e8f059ceb5c09728d4be4039feae1b00a130e75f");
}

TEST(BlockHashTest, Sha256CborIsCanonicalCbor) {
  const BlockHashScheme s(PrefixHashAlgo::kSha256Cbor);
  // sha256(b'\x61\x30'): the text string "0".
  EXPECT_EQ(Hex(s.none_hash()), "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e");
  // 83 | 58 20 <none> | 84 01 02 03 04 | f6
  const std::vector<int32_t> a = {1, 2, 3, 4};
  EXPECT_EQ(Hex(s.HashBlock(s.none_hash(), a, {})),
            "c9d58ba695280d69b243e1e0df813136ca9196b286fb1a021e0b2e028ef071cb");
  // 83 | 58 20 <none> | 82 19 03e8 1a 00011170 | 82 19 03e8 68 "tenant-a"
  const std::vector<int32_t> b = {1000, 70000};
  const uint64_t keys[] = {1000};
  const std::string salt = "tenant-a";
  EXPECT_EQ(Hex(s.HashBlock(s.none_hash(), b, keys, &salt)),
            "7a114a5188cbf82e2a858c85c28162e11f722a27a872d9df0aefb33372a469e5");
}

TEST(BlockHashTest, ChainsParentTokensAndExtraKeys) {
  for (PrefixHashAlgo algo : {PrefixHashAlgo::kSha256, PrefixHashAlgo::kSha256Cbor}) {
    const BlockHashScheme s(algo);
    const BlockHash root = s.none_hash();
    const std::vector<int32_t> a = {1, 2, 3, 4};
    const uint64_t key[] = {7};
    const BlockHash h = s.HashBlock(root, a, {});
    EXPECT_EQ(h, s.HashBlock(root, a, {}));
    EXPECT_NE(h, s.HashBlock(h, a, {}));    // parent matters
    EXPECT_NE(h, s.HashBlock(root, a, key));  // extra keys matter
    EXPECT_NE(h, s.HashBlock(root, std::vector<int32_t>{1, 2, 4, 3}, {}));  // order matters
    EXPECT_NE(s.HashBlock(root, std::vector<int32_t>{1, 2, 3}, {}),
              s.HashBlock(root, std::vector<int32_t>{1, 2, 3, 0}, {}));
    // The chain: block 1's key depends on block 0's tokens; incremental == from scratch.
    std::vector<BlockHash> x, y, inc;
    s.ExtendBlockHashes(std::vector<int32_t>{1, 2, 3, 4, 5}, 2, {}, "", &x);
    s.ExtendBlockHashes(std::vector<int32_t>{9, 2, 3, 4}, 2, {}, "", &y);
    ASSERT_EQ(x.size(), 2u);
    ASSERT_EQ(y.size(), 2u);
    EXPECT_NE(x[1], y[1]);
    s.ExtendBlockHashes(std::vector<int32_t>{1, 2, 3}, 2, {}, "", &inc);
    s.ExtendBlockHashes(std::vector<int32_t>{1, 2, 3, 4, 5}, 2, {}, "", &inc);
    EXPECT_EQ(inc, x);
  }
  // The algorithms and seeds name different chains.
  EXPECT_NE(BlockHashScheme(PrefixHashAlgo::kSha256).none_hash(), BlockHashScheme(PrefixHashAlgo::kSha256Cbor).none_hash());
  EXPECT_NE(BlockHashScheme(PrefixHashAlgo::kSha256, "1").none_hash(), BlockHashScheme().none_hash());
}

TEST(BlockHashTest, SaltsAndTenantsNameDisjointChains) {
  const BlockHashScheme s;
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 7, 8};
  std::set<std::string> seen;
  for (const std::string& salt : {std::string(), std::string("a"), std::string("b"), std::string("a\0", 2),
                                  TenantCacheSalt(ApiKeyTenantId("key-1"), ""),
                                  TenantCacheSalt(ApiKeyTenantId("key-2"), ""),
                                  TenantCacheSalt(ApiKeyTenantId("key-1"), "a")}) {
    std::vector<BlockHash> chain;
    s.ExtendBlockHashes(t, 4, {}, salt, &chain);
    ASSERT_EQ(chain.size(), 2u);
    EXPECT_TRUE(seen.insert(Hex(chain[0])).second) << salt;
    EXPECT_TRUE(seen.insert(Hex(chain[1])).second) << salt;  // every block differs, not just the first
  }
  // A tenant id names the key without holding it; no client salt forges another tenant's.
  EXPECT_EQ(ApiKeyTenantId("key-1").size(), 64u);
  EXPECT_EQ(ApiKeyTenantId("key-1").find("key-1"), std::string::npos);
  EXPECT_EQ(TenantCacheSalt("", "s"), "s");
  const std::string t2 = ApiKeyTenantId("key-2");
  EXPECT_NE(TenantCacheSalt(ApiKeyTenantId("key-1"), "tenant:" + t2 + ":"), TenantCacheSalt(t2, ""));
}

TEST(BlockHashTest, AlgorithmNames) {
  EXPECT_EQ(*ParsePrefixHashAlgo("sha256"), PrefixHashAlgo::kSha256);
  EXPECT_EQ(*ParsePrefixHashAlgo("sha256_cbor"), PrefixHashAlgo::kSha256Cbor);
  EXPECT_EQ(PrefixHashAlgoName(PrefixHashAlgo::kSha256Cbor), "sha256_cbor");
  EXPECT_FALSE(ParsePrefixHashAlgo("builtin").ok());
}

}  // namespace
}  // namespace tessera
