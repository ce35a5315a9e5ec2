#include "server/responses/response_store.h"

#include <utility>
#include <vector>

#include "common/log.h"

namespace tessera::responses {

namespace {
constexpr size_t kEntryOverhead = 256;  // map slot, list node, strings' headers
}

ResponseStore::ResponseStore(ResponseStoreOptions options) : options_(options) {}

size_t ResponseStore::EntryBytes(const StoredResponse& e) {
  auto text = [](const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace).size(); };
  return kEntryOverhead + e.id.size() + e.owner.size() + text(e.response) + text(e.input_items) +
         text(e.conversation);
}

void ResponseStore::Begin(StoredResponse snapshot, bool store, std::function<void()> cancel) {
  auto entry = std::make_shared<StoredResponse>(std::move(snapshot));
  std::lock_guard<std::mutex> lock(mu_);
  const std::string id = entry->id;
  in_flight_[id] = InFlight{std::move(entry), store, false, false, std::move(cancel)};
}

void ResponseStore::Complete(StoredResponse entry) {
  if (options_.shared) {
    auto shared = std::make_shared<const StoredResponse>(std::move(entry));
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = in_flight_.find(shared->id);
      const bool keep = it == in_flight_.end() || (it->second.store && !it->second.deleted);
      if (it != in_flight_.end()) in_flight_.erase(it);
      if (!keep) return;
      writing_[shared->id] = shared;
    }
    auto write = [this, shared] { WriteShared(shared); };
    if (options_.run_blocking) return options_.run_blocking(std::move(write));
    return write();
  }
  const size_t bytes = EntryBytes(entry);  // outside the lock: linear in the entry
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_flight_.find(entry.id);
  const bool keep = it == in_flight_.end() || (it->second.store && !it->second.deleted);
  if (it != in_flight_.end()) in_flight_.erase(it);
  if (!keep || bytes > options_.max_bytes) return;
  if (auto old = stored_.find(entry.id); old != stored_.end()) {
    bytes_ -= old->second.bytes;
    lru_.erase(old->second.lru);
    stored_.erase(old);
  }
  EvictTo(options_.max_bytes - bytes);
  const std::string id = entry.id;
  lru_.push_front(id);
  stored_[id] = Slot{std::make_shared<const StoredResponse>(std::move(entry)), bytes, lru_.begin()};
  bytes_ += bytes;
}

// The entry stays in writing_ (readable here) until its write is done; one
// deleted meanwhile (gone from writing_) is deleted from the shared store
// again, after the write, so it cannot come back.
void ResponseStore::WriteShared(std::shared_ptr<const StoredResponse> entry) {
  const Status put = options_.shared->Put(*entry);
  if (!put.ok()) {
    LogWarn("responses store: {} not stored: {}", entry->id, put.message());
    CountError(put);
  }
  bool deleted = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = writing_.find(entry->id);
    deleted = it == writing_.end() || it->second != entry;
    if (!deleted) writing_.erase(it);
  }
  if (deleted && put.ok()) {
    if (auto d = options_.shared->Delete(entry->id, entry->owner); !d.ok()) CountError(d.status());
  }
}

void ResponseStore::FlushWrites() {
  std::vector<std::shared_ptr<const StoredResponse>> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, entry] : writing_) pending.push_back(entry);
  }
  for (auto& entry : pending) WriteShared(std::move(entry));
}

void ResponseStore::CountError(const Status&) {
  std::lock_guard<std::mutex> lock(mu_);
  ++errors_;
}

int64_t ResponseStore::errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return errors_;
}

void ResponseStore::Abandon(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.erase(id);
}

void ResponseStore::EvictTo(size_t budget) {
  while (bytes_ > budget && !lru_.empty()) {
    auto it = stored_.find(lru_.back());
    bytes_ -= it->second.bytes;
    stored_.erase(it);
    lru_.pop_back();
  }
}

StatusOr<std::shared_ptr<const StoredResponse>> ResponseStore::Find(const std::string& id,
                                                                      const std::string& owner) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = stored_.find(id); it != stored_.end()) {
      if (it->second.entry->owner != owner) return std::shared_ptr<const StoredResponse>();
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return it->second.entry;
    }
    if (auto w = writing_.find(id); w != writing_.end()) {
      return w->second->owner == owner ? w->second : std::shared_ptr<const StoredResponse>();
    }
    if (auto f = in_flight_.find(id); f != in_flight_.end()) {
      if (f->second.snapshot->owner != owner || !f->second.store || f->second.deleted) {
        return std::shared_ptr<const StoredResponse>();
      }
      return std::make_shared<const StoredResponse>(*f->second.snapshot);
    }
  }
  if (!options_.shared) return std::shared_ptr<const StoredResponse>();
  auto r = options_.shared->Get(id, owner);
  if (!r.ok()) CountError(r.status());
  return r;
}

StatusOr<bool> ResponseStore::Erase(const std::string& id, const std::string& owner) {
  std::function<void()> cancel;
  bool was_writing = false, in_flight = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = stored_.find(id); it != stored_.end() && it->second.entry->owner == owner) {
      bytes_ -= it->second.bytes;
      lru_.erase(it->second.lru);
      stored_.erase(it);
      return true;
    }
    if (auto w = writing_.find(id); w != writing_.end() && w->second->owner == owner) {
      writing_.erase(w);  // WriteShared deletes it again once written
      was_writing = true;
    } else if (auto f = in_flight_.find(id); f != in_flight_.end()) {
      if (f->second.snapshot->owner != owner || !f->second.store || f->second.deleted) return false;
      f->second.deleted = true;
      f->second.cancelled = true;
      cancel = f->second.cancel;
      in_flight = true;
    } else if (!options_.shared) {
      return false;
    }
  }
  if (cancel) cancel();  // outside the lock: it may take the engine's
  if (in_flight || was_writing) return true;
  auto d = options_.shared->Delete(id, owner);
  if (!d.ok()) CountError(d.status());
  return d;
}

std::shared_ptr<const StoredResponse> ResponseStore::Get(const std::string& id, const std::string& owner) {
  auto r = Find(id, owner);
  return r.ok() ? *r : nullptr;
}

bool ResponseStore::Delete(const std::string& id, const std::string& owner) {
  auto r = Erase(id, owner);
  return r.ok() && *r;
}

ResponseStore::CancelResult ResponseStore::Cancel(const std::string& id, const std::string& owner, Json* snapshot) {
  std::function<void()> cancel;
  bool in_flight = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto f = in_flight_.find(id);
    if (f != in_flight_.end() && f->second.snapshot->owner == owner && !f->second.deleted) {
      in_flight = true;
      f->second.cancelled = true;
      f->second.snapshot->response["status"] = "cancelled";
      *snapshot = f->second.snapshot->response;
      cancel = f->second.cancel;
    } else if (auto it = stored_.find(id); it != stored_.end() && it->second.entry->owner == owner) {
      *snapshot = it->second.entry->response;
      return CancelResult::kNotInProgress;
    } else if (auto w = writing_.find(id); w != writing_.end() && w->second->owner == owner) {
      *snapshot = w->second->response;
      return CancelResult::kNotInProgress;
    } else if (!options_.shared) {
      return CancelResult::kNotFound;
    }
  }
  if (!in_flight) {  // not in flight here: finished in the shared store, or unknown (an error reads as unknown)
    auto r = options_.shared->Get(id, owner);
    if (!r.ok()) CountError(r.status());
    if (!r.ok() || *r == nullptr) return CancelResult::kNotFound;
    *snapshot = (*r)->response;
    return CancelResult::kNotInProgress;
  }
  if (cancel) cancel();  // outside the lock: it may take the engine's
  return CancelResult::kCancelled;
}

bool ResponseStore::CancelRequested(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto f = in_flight_.find(id);
  return f != in_flight_.end() && f->second.cancelled;
}

size_t ResponseStore::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stored_.size();
}

}  // namespace tessera::responses
