// The bytes a tier stores for one block: a fixed header, the serialized key,
// then the payload.
//
//   offset size
//   0      8    magic "TSKVBLK\0"
//   8      4    version (1), little-endian
//   12     4    key length K
//   16     8    payload size N
//   24     8    payload checksum (64-bit FNV-1a)
//   32     8    header checksum (FNV-1a of bytes 0..31 and the key)
//   40     K    SerializeKey(key)
//   40+K   N    payload
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "engine/kv_tiers/kv_block_store.h"

namespace tessera::kv_tiers {

inline constexpr uint32_t kKvRecordVersion = 1;
inline constexpr size_t kKvRecordHeaderBytes = 40;
inline constexpr size_t kMaxKeyBytes = 4096;

// 64-bit FNV-1a continued from `seed`. Not cryptographic: catches corruption
// on disk or in transit, not a malicious writer.
uint64_t Fnv1a64(const void* data, size_t bytes, uint64_t seed = 0xcbf29ce484222325ULL);

std::string EncodeKvRecord(const KvBlockKey& key, std::string_view payload);

struct KvRecordHeader {
  uint64_t payload_size = 0;
  std::string key;  // serialized
};

// Header and key only (cheap; a disk store's startup scan). DATA_LOSS when
// the magic, version, sizes or header checksum are wrong.
StatusOr<KvRecordHeader> DecodeKvRecordHeader(std::string_view bytes);

// The payload of a whole record, checked: DATA_LOSS for a bad header, size or
// payload checksum; FAILED_PRECONDITION when it holds another key (another
// model fingerprint, layout, hash or tenant).
StatusOr<std::string> DecodeKvRecord(std::string_view record, const KvBlockKey& expected);

}  // namespace tessera::kv_tiers
