#include "server/responses/response_store.h"

#include <utility>

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

std::shared_ptr<const StoredResponse> ResponseStore::Get(const std::string& id, const std::string& owner) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = stored_.find(id); it != stored_.end()) {
    if (it->second.entry->owner != owner) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    return it->second.entry;
  }
  auto f = in_flight_.find(id);
  if (f == in_flight_.end() || f->second.snapshot->owner != owner || !f->second.store || f->second.deleted) {
    return nullptr;
  }
  return std::make_shared<const StoredResponse>(*f->second.snapshot);
}

bool ResponseStore::Delete(const std::string& id, const std::string& owner) {
  std::function<void()> cancel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = stored_.find(id); it != stored_.end() && it->second.entry->owner == owner) {
      bytes_ -= it->second.bytes;
      lru_.erase(it->second.lru);
      stored_.erase(it);
      return true;
    }
    auto f = in_flight_.find(id);
    if (f == in_flight_.end() || f->second.snapshot->owner != owner || !f->second.store || f->second.deleted) {
      return false;
    }
    f->second.deleted = true;
    f->second.cancelled = true;
    cancel = f->second.cancel;
  }
  if (cancel) cancel();
  return true;
}

ResponseStore::CancelResult ResponseStore::Cancel(const std::string& id, const std::string& owner, Json* snapshot) {
  std::function<void()> cancel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto f = in_flight_.find(id);
    if (f != in_flight_.end() && f->second.snapshot->owner == owner && !f->second.deleted) {
      f->second.cancelled = true;
      f->second.snapshot->response["status"] = "cancelled";
      *snapshot = f->second.snapshot->response;
      cancel = f->second.cancel;
    } else if (auto it = stored_.find(id); it != stored_.end() && it->second.entry->owner == owner) {
      *snapshot = it->second.entry->response;
      return CancelResult::kNotInProgress;
    } else {
      return CancelResult::kNotFound;
    }
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
