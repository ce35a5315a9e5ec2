// vLLM's KV-event wire format (vllm/distributed/kv_events.py), so Tessera
// instances feed the KV-aware routers that consume vLLM's events:
//
//   EventBatch       = [ts: float64, events: [event...], data_parallel_rank: int]
//   BlockStored      = ["BlockStored", [hash...], parent: hash|nil, [token_id...],
//                       block_size: int, lora_id: int|nil, medium: str|nil]
//   BlockRemoved     = ["BlockRemoved", [hash...], medium: str|nil]
//   AllBlocksCleared = ["AllBlocksCleared"]
//
// msgpack (msgspec's array_like, tagged structs). A hash is vLLM's
// ExternalBlockHash: bytes or an int; Tessera sends its SHA-256 chained hash
// as the 32 digest bytes, as vLLM does with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0
// (its int form keeps only the last 8 bytes, which a tenant could collide). Trailing optional fields may be absent
// on decode (msgspec omits defaults). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "scheduler/block_hash.h"

namespace tessera::kv_events {

// An ExternalBlockHash as opaque bytes: a bytes hash as is; an int hash as
// 'i' + its 8 bytes big-endian (so the two spaces never collide).
using HashKey = std::string;

HashKey KeyOf(const BlockHash& hash);  // the 32 bytes Tessera sends
HashKey KeyOfInt(int64_t hash);

struct BlockStored {
  std::vector<HashKey> block_hashes;
  std::optional<HashKey> parent_block_hash;
  std::vector<int32_t> token_ids;
  int32_t block_size = 0;
  std::optional<int64_t> lora_id;
  std::optional<std::string> medium;
  bool operator==(const BlockStored&) const = default;
};

struct BlockRemoved {
  std::vector<HashKey> block_hashes;
  std::optional<std::string> medium;
  bool operator==(const BlockRemoved&) const = default;
};

struct AllBlocksCleared {
  bool operator==(const AllBlocksCleared&) const = default;
};

using KvEvent = std::variant<BlockStored, BlockRemoved, AllBlocksCleared>;

struct EventBatch {
  double ts = 0;  // seconds since the Unix epoch
  std::vector<KvEvent> events;
  std::optional<int64_t> data_parallel_rank;
};

// Largest payload DecodeEventBatch accepts (the publisher never sends more).
inline constexpr size_t kMaxEventBatchBytes = 64u << 20;

std::string EncodeEventBatch(const EventBatch& batch);

// INVALID_ARGUMENT naming what is wrong for anything that is not an EventBatch
// of known events (unknown event tags are refused, not skipped).
StatusOr<EventBatch> DecodeEventBatch(std::string_view payload);

}  // namespace tessera::kv_events
