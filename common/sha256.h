// SHA-256 and HMAC-SHA256 over OpenSSL's libcrypto: the digests that name KV
// blocks wherever they leave the process (scheduler/block_hash.h) and that
// authenticate records in shared KV tiers (engine/kv_tiers/kv_block_record.h).
//
// Thread-safe: every function and object keeps its own state (a Sha256 object
// is used by one thread at a time). Cost: OpenSSL's, ~650 MB/s on 128-byte
// inputs with SHA extensions, plus a fixed ~0.2-1 us per digest.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace tessera {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental SHA-256. Finish() may be called once; Reset() starts over.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Reset();
  void Update(const void* data, size_t bytes);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  Sha256Digest Finish();

 private:
  void* ctx_;  // EVP_MD_CTX*, owned
};

// SHA-256 of `data` in one call.
Sha256Digest Sha256Of(std::string_view data);

// HMAC-SHA256 under `key` of the concatenation of `parts` (RFC 2104).
Sha256Digest HmacSha256(std::string_view key, std::initializer_list<std::string_view> parts);

// Equality in time independent of where the digests differ (MAC checks).
bool DigestsEqualConstTime(const Sha256Digest& a, const Sha256Digest& b);

// Lower-case hex, 64 digits.
std::string ToHex(const Sha256Digest& d);

}  // namespace tessera
