#include "scheduler/block_hash.h"

namespace tessera {
namespace {

// Stafford's variant 13 of the MurmurHash3 64-bit finalizer: a bijection with
// full avalanche.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Two 64-bit lanes with independent keys; every input word is avalanched into
// both lanes, and the lanes are cross-mixed at the end.
class Hasher128 {
 public:
  explicit Hasher128(const BlockHash& parent)
      : a_(Mix64(parent.hi ^ 0x9e3779b97f4a7c15ULL)), b_(Mix64(parent.lo ^ 0xc2b2ae3d27d4eb4fULL)) {}

  void Add(uint64_t w) {
    a_ = Rotl(a_ ^ Mix64(w + 0x243f6a8885a308d3ULL), 27) * 5 + 0x52dce729ULL;
    b_ = Rotl(b_ ^ Mix64(w ^ 0x13198a2e03707344ULL), 31) * 5 + 0x38495ab5ULL;
  }

  BlockHash Finish(uint64_t length_tag) {
    a_ ^= length_tag;
    b_ ^= Rotl(length_tag, 32);
    a_ += b_;
    b_ += a_;
    a_ = Mix64(a_);
    b_ = Mix64(b_ ^ 0xa4093822299f31d0ULL);
    a_ += b_;
    b_ += a_;
    return {a_, b_};
  }

 private:
  uint64_t a_, b_;
};

}  // namespace

BlockHash HashBlock(const BlockHash& parent, std::span<const int32_t> tokens,
                    std::span<const uint64_t> extra_keys) {
  Hasher128 h(parent);
  size_t i = 0;
  for (; i + 1 < tokens.size(); i += 2) {
    h.Add(static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) |
          (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i + 1])) << 32));
  }
  if (i < tokens.size()) h.Add(static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) | (1ULL << 63));
  for (uint64_t k : extra_keys) h.Add(k);
  // Lengths disambiguate where tokens end and extra keys begin.
  return h.Finish((static_cast<uint64_t>(tokens.size()) << 32) | extra_keys.size());
}

BlockHash CacheSaltRoot(std::string_view salt) {
  if (salt.empty()) return kRootBlockHash;
  Hasher128 h(kRootBlockHash);
  h.Add(0x73616c7400000000ULL);  // domain tag "salt": never a token pair's encoding alone
  uint64_t word = 0;
  size_t i = 0;
  for (; i < salt.size(); ++i) {
    word |= static_cast<uint64_t>(static_cast<unsigned char>(salt[i])) << (8 * (i % 8));
    if (i % 8 == 7) {
      h.Add(word);
      word = 0;
    }
  }
  if (i % 8 != 0) h.Add(word);
  return h.Finish(~static_cast<uint64_t>(salt.size()));
}

void ExtendBlockHashes(std::span<const int32_t> tokens, int32_t block_size,
                       std::span<const uint64_t> extra_keys, std::vector<BlockHash>* hashes, const BlockHash& root) {
  const size_t full = tokens.size() / static_cast<size_t>(block_size);
  while (hashes->size() < full) {
    const size_t b = hashes->size();
    const BlockHash parent = b == 0 ? root : (*hashes)[b - 1];
    hashes->push_back(HashBlock(parent, tokens.subspan(b * block_size, block_size), extra_keys));
  }
}

}  // namespace tessera
