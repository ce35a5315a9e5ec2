// What the scheduler decides about the KV tiers below the device pool
// (docs/architecture.md, "KV connectors"), as plain data between the Scheduler and the engine loop:
// which newly computed blocks to spill, and which blocks of a waiting
// request's prompt to look for in the tiers before its prefill.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/block_hash.h"
#include "scheduler/kv_cache_manager.h"

namespace tessera {

// A full block just registered in the prefix cache: its bytes are valid until
// the next Schedule() (the engine loop copies them out right after the step).
struct KvTierSpill {
  BlockId block = -1;
  BlockHash hash;
  std::string cache_salt;  // the request's; becomes the tier key's tenant tag (a digest)
};

// A waiting sequence's prompt blocks [first_block, first_block + hashes.size())
// that the device pool lacks: the tiers are asked for the longest leading run
// of them. The sequence is not admitted until the answer is applied
// (Scheduler::BeginTierLoad / EndTierLoad), so other requests keep running.
struct KvTierFetch {
  SeqId seq = 0;
  std::string request_id;
  std::string cache_salt;
  int64_t first_block = 0;
  std::vector<BlockHash> hashes;
};

}  // namespace tessera
