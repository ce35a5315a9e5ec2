// BlockHash: the prefix-cache key of one full KV block — a 128-bit chained hash
// of (parent block's hash, the block's token ids, extra keys). Chaining makes
// the key identify the whole prefix, not just the block's own tokens.
//
// Collisions: a hit is taken on hash equality alone (tokens are not compared),
// so a collision would silently reuse wrong KV. With 128 well-mixed bits and
// even 2^40 distinct blocks ever cached, the birthday bound gives a collision
// probability below 2^-48. The mixer is not cryptographic: a tenant able to
// craft prompts could in principle search for collisions, so multi-tenant
// deployments separate tenants with a cache salt in Request::cache_keys (and a
// SHA-256 variant can replace HashBlock without touching callers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace tessera {

struct BlockHash {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const BlockHash&) const = default;
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.lo ^ (h.hi >> 1)); }
};

// The parent of a sequence's first block.
inline constexpr BlockHash kRootBlockHash{0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL};

// The parent of a first block salted with `salt` (vLLM's cache_salt):
// kRootBlockHash for "", else a hash of the salt's bytes. Different salts give
// different chains, so tenants never share (or probe) each other's blocks. O(salt).
BlockHash CacheSaltRoot(std::string_view salt);

// Hash of one full block. O(tokens + extra keys).
BlockHash HashBlock(const BlockHash& parent, std::span<const int32_t> tokens,
                    std::span<const uint64_t> extra_keys);

// Extends `hashes` (the chain for tokens[0, hashes->size() * block_size)) to
// cover every full block of `tokens`. Incremental: O(newly full blocks).
// `root` is the first block's parent (CacheSaltRoot for a salted request).
void ExtendBlockHashes(std::span<const int32_t> tokens, int32_t block_size,
                       std::span<const uint64_t> extra_keys, std::vector<BlockHash>* hashes,
                       const BlockHash& root = kRootBlockHash);

}  // namespace tessera
