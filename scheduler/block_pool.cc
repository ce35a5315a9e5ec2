#include "scheduler/block_pool.h"

#include <cassert>

namespace tessera {

BlockPool::BlockPool(int32_t num_blocks, bool enable_caching)
    : num_blocks_(num_blocks), caching_(enable_caching), blocks_(num_blocks + 1) {
  assert(num_blocks > 0);
  Meta& s = blocks_[num_blocks_];
  s.prev = s.next = num_blocks_;
  for (BlockId b = 0; b < num_blocks_; ++b) PushBack(b);
}

void BlockPool::PushBack(BlockId b) {
  Meta& s = blocks_[num_blocks_];
  Meta& m = blocks_[b];
  m.prev = s.prev;
  m.next = num_blocks_;
  blocks_[s.prev].next = b;
  s.prev = b;
  m.in_free_queue = true;
  ++num_free_;
}

void BlockPool::Unlink(BlockId b) {
  Meta& m = blocks_[b];
  assert(m.in_free_queue);
  blocks_[m.prev].next = m.next;
  blocks_[m.next].prev = m.prev;
  m.prev = m.next = -1;
  m.in_free_queue = false;
  --num_free_;
}

void BlockPool::Evict(BlockId b) {
  Meta& m = blocks_[b];
  if (!m.cached) return;
  by_hash_.erase(m.hash);
  m.cached = false;
  ++num_evictions_;
  if (sink_) sink_->OnBlocksRemoved(std::span<const BlockHash>(&m.hash, 1));
}

std::vector<BlockId> BlockPool::Allocate(int32_t n) {
  assert(n <= num_free_);
  std::vector<BlockId> out;
  out.reserve(n);
  for (int32_t i = 0; i < n; ++i) {
    const BlockId b = blocks_[num_blocks_].next;
    Unlink(b);
    Evict(b);
    blocks_[b].ref_count = 1;
    out.push_back(b);
  }
  return out;
}

std::optional<BlockId> BlockPool::Lookup(const BlockHash& hash) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::Touch(BlockId b) {
  Meta& m = blocks_[b];
  if (m.ref_count == 0) Unlink(b);
  ++m.ref_count;
}

void BlockPool::Release(BlockId b) {
  Meta& m = blocks_[b];
  assert(m.ref_count > 0);
  if (--m.ref_count == 0) PushBack(b);
}

bool BlockPool::Cache(BlockId b, const BlockHash& hash) {
  Meta& m = blocks_[b];
  if (!caching_ || m.cached) return false;
  if (!by_hash_.emplace(hash, b).second) return false;
  m.cached = true;
  m.hash = hash;
  return true;
}

void BlockPool::ResetPrefixCache() {
  std::vector<BlockHash> dropped;
  for (BlockId b = 0; b < num_blocks_; ++b) {
    if (blocks_[b].cached && blocks_[b].ref_count == 0) {
      by_hash_.erase(blocks_[b].hash);
      blocks_[b].cached = false;
      if (sink_) dropped.push_back(blocks_[b].hash);
    }
  }
  if (!sink_) return;
  if (by_hash_.empty()) {
    sink_->OnAllBlocksCleared();
  } else if (!dropped.empty()) {
    sink_->OnBlocksRemoved(dropped);
  }
}

std::vector<BlockId> BlockPool::FreeQueue() const {
  std::vector<BlockId> out;
  for (int32_t b = blocks_[num_blocks_].next; b != num_blocks_; b = blocks_[b].next) out.push_back(b);
  return out;
}

}  // namespace tessera
