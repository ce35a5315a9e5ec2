#include "server/kv_events/kv_prefix_index.h"

#include <algorithm>
#include <mutex>

namespace tessera::kv_events {

struct KvPrefixIndex::Instance {
  std::string name;
  struct Entry {
    uint8_t mediums = 0;  // bit per medium name (mediums_)
    std::list<HashKey>::iterator lru;
  };
  std::unordered_map<HashKey, Entry> blocks;
  std::list<HashKey> lru;  // least recently stored first
  Clock::time_point last_event = Clock::now();
};

KvPrefixIndex::KvPrefixIndex(KvPrefixIndexOptions options) : options_(options) {
  if (options_.max_blocks_per_instance < 1) options_.max_blocks_per_instance = 1;
  mediums_.push_back("GPU");
}

KvPrefixIndex::~KvPrefixIndex() = default;

KvPrefixIndex::Instance& KvPrefixIndex::Get(const std::string& instance) {
  auto it = slot_of_.find(instance);
  if (it != slot_of_.end()) return *slots_[it->second];
  uint32_t slot = 0;
  while (slot < slots_.size() && slots_[slot]) ++slot;
  if (slot == slots_.size()) slots_.emplace_back();
  slots_[slot] = std::make_unique<Instance>();
  slots_[slot]->name = instance;
  slot_of_[instance] = slot;
  return *slots_[slot];
}

uint8_t KvPrefixIndex::MediumBit(const std::optional<std::string>& medium) {
  const std::string& name = medium ? *medium : mediums_[0];
  for (size_t i = 0; i < mediums_.size(); ++i) {
    if (mediums_[i] == name) return static_cast<uint8_t>(1u << i);
  }
  if (mediums_.size() < 8) {
    mediums_.push_back(name);
    return static_cast<uint8_t>(1u << (mediums_.size() - 1));
  }
  return 1u << 7;  // more than 8 medium names: the rest share the last bit
}

void KvPrefixIndex::Store(uint32_t slot, Instance& inst, const HashKey& key, uint8_t bit) {
  auto [it, fresh] = inst.blocks.try_emplace(key);
  if (fresh) {
    holders_[key].push_back(slot);
    ++num_entries_;
  } else {
    inst.lru.erase(it->second.lru);
  }
  it->second.mediums |= bit;
  it->second.lru = inst.lru.insert(inst.lru.end(), key);
  while (static_cast<int64_t>(inst.blocks.size()) > options_.max_blocks_per_instance) {
    const HashKey oldest = inst.lru.front();
    Drop(slot, inst, oldest, 0xff);
  }
}

void KvPrefixIndex::Drop(uint32_t slot, Instance& inst, const HashKey& key, uint8_t bits) {
  auto it = inst.blocks.find(key);
  if (it == inst.blocks.end()) return;
  it->second.mediums &= static_cast<uint8_t>(~bits);
  if (it->second.mediums != 0) return;
  inst.lru.erase(it->second.lru);
  inst.blocks.erase(it);
  --num_entries_;
  auto h = holders_.find(key);
  if (h == holders_.end()) return;
  std::erase(h->second, slot);
  if (h->second.empty()) holders_.erase(h);
}

void KvPrefixIndex::ClearLocked(uint32_t slot, Instance& inst) {
  for (const auto& [key, entry] : inst.blocks) {
    auto h = holders_.find(key);
    if (h == holders_.end()) continue;
    std::erase(h->second, slot);
    if (h->second.empty()) holders_.erase(h);
  }
  num_entries_ -= static_cast<int64_t>(inst.blocks.size());
  inst.blocks.clear();
  inst.lru.clear();
}

void KvPrefixIndex::AddInstance(const std::string& instance) {
  std::unique_lock lock(mu_);
  Get(instance);
}

void KvPrefixIndex::Apply(const std::string& instance, const EventBatch& batch) {
  std::unique_lock lock(mu_);
  Instance& inst = Get(instance);
  const uint32_t slot = slot_of_[instance];
  inst.last_event = Clock::now();
  for (const KvEvent& ev : batch.events) {
    if (const auto* s = std::get_if<BlockStored>(&ev)) {
      const uint8_t bit = MediumBit(s->medium);
      for (const HashKey& k : s->block_hashes) Store(slot, inst, k, bit);
    } else if (const auto* r = std::get_if<BlockRemoved>(&ev)) {
      const uint8_t bit = MediumBit(r->medium);
      for (const HashKey& k : r->block_hashes) Drop(slot, inst, k, bit);
    } else {
      ClearLocked(slot, inst);
    }
  }
}

void KvPrefixIndex::ClearInstance(const std::string& instance) {
  std::unique_lock lock(mu_);
  auto it = slot_of_.find(instance);
  if (it == slot_of_.end()) return;
  ClearLocked(it->second, *slots_[it->second]);
}

void KvPrefixIndex::RemoveInstance(const std::string& instance) {
  std::unique_lock lock(mu_);
  auto it = slot_of_.find(instance);
  if (it == slot_of_.end()) return;
  ClearLocked(it->second, *slots_[it->second]);
  slots_[it->second].reset();
  slot_of_.erase(it);
}

std::vector<InstanceMatch> KvPrefixIndex::Match(std::span<const HashKey> keys) const {
  std::shared_lock lock(mu_);
  const auto now = Clock::now();
  std::vector<int64_t> matched(slots_.size(), 0);
  // Instances still matching every key so far; shrinks as the walk goes on.
  std::vector<uint32_t> alive;
  for (uint32_t s = 0; s < slots_.size(); ++s) {
    if (slots_[s]) alive.push_back(s);
  }
  for (size_t i = 0; i < keys.size() && !alive.empty(); ++i) {
    auto h = holders_.find(keys[i]);
    if (h == holders_.end()) break;
    std::vector<uint32_t> next;
    for (uint32_t s : alive) {
      if (std::find(h->second.begin(), h->second.end(), s) != h->second.end()) {
        ++matched[s];
        next.push_back(s);
      }
    }
    alive.swap(next);
  }
  std::vector<InstanceMatch> out;
  for (uint32_t s = 0; s < slots_.size(); ++s) {
    if (!slots_[s]) continue;
    const Instance& inst = *slots_[s];
    out.push_back({inst.name, matched[s], static_cast<int64_t>(inst.blocks.size()),
                   std::chrono::duration<double>(now - inst.last_event).count()});
  }
  std::sort(out.begin(), out.end(), [](const InstanceMatch& a, const InstanceMatch& b) {
    return a.matched_blocks != b.matched_blocks ? a.matched_blocks > b.matched_blocks : a.instance < b.instance;
  });
  return out;
}

std::vector<InstanceMatch> KvPrefixIndex::Match(std::span<const BlockHash> hashes) const {
  std::vector<HashKey> keys;
  keys.reserve(hashes.size());
  for (const BlockHash& h : hashes) keys.push_back(KeyOf(h));
  return Match(std::span<const HashKey>(keys));
}

int64_t KvPrefixIndex::num_entries() const {
  std::shared_lock lock(mu_);
  return num_entries_;
}

std::vector<std::string> KvPrefixIndex::instances() const {
  std::shared_lock lock(mu_);
  std::vector<std::string> out;
  for (const auto& [name, slot] : slot_of_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace tessera::kv_events
