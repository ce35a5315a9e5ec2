// Helpers shared by the KV event tests over real ZeroMQ sockets: bounded
// waits, a block-hash chain of 4-token blocks, and what an index says an
// instance holds of a chain.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "scheduler/block_hash.h"
#include "server/kv_events/kv_prefix_index.h"

namespace tessera::kv_events {

// True once `cond` holds, false after 5 s (polled every 5 ms).
inline bool WaitFor(const std::function<bool()>& cond) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

// Leading blocks of `chain` that `name` holds per `idx`; -1 when it holds none.
inline int64_t MatchedOf(const KvPrefixIndex& idx, std::span<const BlockHash> chain, const std::string& name) {
  for (const auto& m : idx.Match(chain)) {
    if (m.instance == name) return m.matched_blocks;
  }
  return -1;
}

// The chained hashes of `n_blocks` blocks of 4 tokens first_token, first_token + 1, ...
inline std::vector<BlockHash> Chain(int32_t first_token, int n_blocks) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n_blocks * 4; ++i) tokens.push_back(first_token + i);
  std::vector<BlockHash> chain;
  BlockHashScheme().ExtendBlockHashes(tokens, 4, {}, "", &chain);
  return chain;
}

}  // namespace tessera::kv_events
