// The bytes a tier stores for one block: a fixed header, the serialized key,
// then the payload.
//
//   offset size
//   0      8    magic "TSKVBLK\0"
//   8      4    version (2), little-endian
//   12     4    key length K
//   16     8    payload size N
//   24     8    payload checksum (64-bit FNV-1a)
//   32     8    header checksum (FNV-1a of bytes 0..31 and the key)
//   40     32   MAC: HMAC-SHA256 under the deployment secret of bytes 0..39,
//               the key and the payload; zeros when written without a secret
//   72     K    SerializeKey(key)
//   72+K   N    payload
//
// The checksums catch corruption; only the MAC stops a malicious writer (anyone
// who can write to a shared Redis or disk tier can forge a valid checksum), so
// a reader holding the secret refuses every record whose MAC does not verify
// (docs/architecture.md, "Tamper-proof shared KV"). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "engine/kv_tiers/kv_block_store.h"

namespace tessera::kv_tiers {

inline constexpr uint32_t kKvRecordVersion = 2;
inline constexpr size_t kKvRecordHeaderBytes = 72;
inline constexpr size_t kMaxKeyBytes = 4096;

// 64-bit FNV-1a continued from `seed`. Not cryptographic: catches corruption
// on disk or in transit, not a malicious writer.
uint64_t Fnv1a64(const void* data, size_t bytes, uint64_t seed = 0xcbf29ce484222325ULL);

// `secret` (the --kv-offload-secret-file contents; "" : none) keys the MAC.
// Cost with a secret: one HMAC-SHA256 pass over the payload.
std::string EncodeKvRecord(const KvBlockKey& key, std::string_view payload, std::string_view secret = {});

struct KvRecordHeader {
  uint64_t payload_size = 0;
  std::string key;  // serialized
};

// Header and key only (cheap; a disk store's startup scan). DATA_LOSS when
// the magic, version, sizes or header checksum are wrong.
StatusOr<KvRecordHeader> DecodeKvRecordHeader(std::string_view bytes);

// Why a record was refused (stores count corrupt and rejected records apart).
enum class KvRecordFault { kNone, kCorrupt, kOtherKey, kUnauthenticated };

// The payload of a whole record, checked: DATA_LOSS for a bad header, size or
// payload checksum (kCorrupt); FAILED_PRECONDITION when it holds another key
// (another model fingerprint, layout, hash or tenant: kOtherKey) or, with a
// non-empty `secret`, when its MAC is not that secret's (planted, altered, or
// written by an instance without the secret: kUnauthenticated).
StatusOr<std::string> DecodeKvRecord(std::string_view record, const KvBlockKey& expected,
                                     std::string_view secret = {}, KvRecordFault* fault = nullptr);

}  // namespace tessera::kv_tiers
