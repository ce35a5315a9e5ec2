// BlockHash: the prefix-cache key of one full KV block — a SHA-256 chained
// hash of (parent block's hash, the block's token ids, extra keys), computed
// exactly as vLLM's hash_block_tokens with --prefix-caching-hash-algo
// sha256 (pickle) or sha256_cbor (canonical CBOR), so Tessera's keys are
// vLLM's keys: KV events, tiers and PD transfers name blocks the same way on
// both, and a KV-aware router computes them from token ids alone.
//
// Chaining makes the key identify the whole prefix. A hit is taken on hash
// equality alone (tokens are not compared), as in vLLM: with SHA-256 a
// collision — even one searched for by a tenant crafting prompts — is out of
// reach, which is why these keys may leave the process (tiers, PD, KV events,
// peer fetch). Tenants are separated by namespaces: vLLM's cache_salt is an
// extra key of the first block (docs/architecture.md, "Tenant isolation").
//
// Cost: one serialization and SHA-256 of ~2-5 bytes per token per block
// (1.5-4.5 us for a 16-token block measured on a busy 2-core machine),
// negligible beside computing the block; no faster non-cryptographic variant
// is offered (scheduler/README.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/sha256.h"
#include "common/status.h"

namespace tessera {

struct BlockHash {
  Sha256Digest digest{};
  bool operator==(const BlockHash&) const = default;
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const {
    size_t v;
    std::memcpy(&v, h.digest.data(), sizeof(v));  // already uniform
    return v;
  }
};

// vLLM's --prefix-caching-hash-algo: what a block's tuple is serialized with
// before SHA-256. kSha256 is vLLM's default.
enum class PrefixHashAlgo { kSha256, kSha256Cbor };

std::string_view PrefixHashAlgoName(PrefixHashAlgo algo);  // "sha256", "sha256_cbor"
// INVALID_ARGUMENT naming the accepted names.
StatusOr<PrefixHashAlgo> ParsePrefixHashAlgo(std::string_view name);

// The seed of the first block's parent (vLLM's NONE_HASH = hash_fn(seed)).
// vLLM takes PYTHONHASHSEED (random without it); Tessera's default is that of
// vLLM started with PYTHONHASHSEED=0, so every instance and router agrees.
inline constexpr std::string_view kDefaultPrefixHashSeed = "0";

// How a deployment hashes blocks: the algorithm and the chain's root. Every
// instance and router of a cluster must use the same scheme (KV events and
// tiers of another scheme simply never match). A small value; thread-safe.
class BlockHashScheme {
 public:
  BlockHashScheme() : BlockHashScheme(PrefixHashAlgo::kSha256) {}
  explicit BlockHashScheme(PrefixHashAlgo algo, std::string_view seed = kDefaultPrefixHashSeed);

  PrefixHashAlgo algo() const { return algo_; }
  const BlockHash& none_hash() const { return none_hash_; }

  // vLLM's hash_block_tokens(hash_fn, parent, tokens, extra_keys): the hash of
  // the tuple (parent, tuple(tokens), extra_keys), where extra_keys is None
  // when `int_keys` is empty and `salt` is null, else the tuple of int_keys
  // followed by the salt string. O(tokens + keys).
  BlockHash HashBlock(const BlockHash& parent, std::span<const int32_t> tokens,
                      std::span<const uint64_t> int_keys, const std::string* salt = nullptr) const;

  // Extends `hashes` (the chain for tokens[0, hashes->size() * block_size)) to
  // cover every full block of `tokens`. The first block's parent is
  // none_hash(); `cache_salt` (vLLM's, "" for none) is an extra key of the
  // first block only; `int_keys` (e.g. a LoRA id) of every block.
  // Incremental: O(newly full blocks).
  void ExtendBlockHashes(std::span<const int32_t> tokens, int32_t block_size, std::span<const uint64_t> int_keys,
                         const std::string& cache_salt, std::vector<BlockHash>* hashes) const;

 private:
  PrefixHashAlgo algo_;
  BlockHash none_hash_;
};

// Tenant namespaces (--cache-isolation api-key; docs/architecture.md, "Tenant
// isolation"). A tenant id names an API key without revealing it: the hex
// SHA-256 of a domain tag and the key.
std::string ApiKeyTenantId(std::string_view api_key);
// The cache_salt a request of `tenant` hashes with: `client_salt` alone for no
// tenant (""), else a salt only that tenant can produce (it starts with the
// fixed-length tenant id, whatever the client's own salt is).
std::string TenantCacheSalt(std::string_view tenant, std::string_view client_salt);

}  // namespace tessera
