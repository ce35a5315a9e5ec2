#include "scheduler/cache_waterfall.h"

#include <numeric>

namespace tessera {

std::string_view CacheSourceName(CacheSource source) {
  switch (source) {
    case CacheSource::kPool: return "pool";
    case CacheSource::kHost: return "host";
    case CacheSource::kDisk: return "disk";
    case CacheSource::kRedis: return "redis";
    case CacheSource::kPeer: return "peer";
  }
  return "pool";
}

std::string_view ComputeReasonName(ComputeReason reason) {
  switch (reason) {
    case ComputeReason::kNoPrefix: return "no_prefix";
    case ComputeReason::kEvicted: return "evicted";
    case ComputeReason::kNotWritten: return "not_written";
    case ComputeReason::kRoutedElsewhere: return "routed_elsewhere";
    case ComputeReason::kTail: return "tail";
  }
  return "no_prefix";
}

std::optional<CacheSource> CacheSourceOfTier(std::string_view tier_name) {
  for (CacheSource s : {CacheSource::kHost, CacheSource::kDisk, CacheSource::kRedis}) {
    if (CacheSourceName(s) == tier_name) return s;
  }
  return std::nullopt;
}

int64_t CacheWaterfall::cached_total() const { return std::accumulate(cached.begin(), cached.end(), int64_t{0}); }

int64_t CacheWaterfall::computed_total() const {
  return std::accumulate(computed.begin(), computed.end(), int64_t{0});
}

CacheWaterfall& CacheWaterfall::operator+=(const CacheWaterfall& other) {
  for (size_t i = 0; i < cached.size(); ++i) cached[i] += other.cached[i];
  for (size_t i = 0; i < computed.size(); ++i) computed[i] += other.computed[i];
  return *this;
}

void RecentBlockHashes::Insert(const BlockHash& hash) {
  if (capacity_ == 0 || !set_.insert(hash).second) return;
  order_.push_back(hash);
  while (order_.size() > capacity_) {
    set_.erase(order_.front());
    order_.pop_front();
  }
}

void RecentBlockHashes::Clear() {
  order_.clear();
  set_.clear();
}

}  // namespace tessera
