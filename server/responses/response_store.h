// The response store behind `store` and `previous_response_id`: finished
// Response objects with the input items of their request and the
// conversation a continuation starts from, in memory, least recently used
// first out past a byte cap (serve --responses-store-max-bytes). In-flight
// responses are tracked apart (they are not evicted and do not count
// against the cap) so that GET shows them in progress and cancel can abort
// their generation.
//
// Every lookup names the owner (the API key's tenant, server/http/): another
// owner's id is "not found", as an unknown one. Finished responses live in
// this process (LRU above) or, with a SharedResponseStore (serve
// --responses-store-url: redis_response_store.h), there, so that every
// instance sharing it can read and continue them; in-flight ones stay here.
// Thread-safe (one mutex; every operation O(1) besides copying a shared_ptr,
// Complete's size estimate is linear in the entry). With a shared store,
// Find/Erase/Cancel block on it (call them off the I/O threads); Complete
// hands its write to options.run_blocking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tessera::responses {

using Json = nlohmann::ordered_json;

struct StoredResponse {
  std::string id;     // "resp_…"
  std::string owner;  // the tenant that created it
  Json response;      // the Response object as the create call answered it
  Json input_items;   // this request's input items (stored form), in order
  // What previous_response_id continues from: the previous conversation, this
  // input and this output, in order (reasoning items included).
  Json conversation;
};

// Finished responses kept outside this process. Thread-safe; blocking
// (bounded by the backend's timeouts). UNAVAILABLE when it cannot answer.
class SharedResponseStore {
 public:
  virtual ~SharedResponseStore() = default;
  // RESOURCE_EXHAUSTED when the record is over the backend's size cap.
  virtual Status Put(const StoredResponse& entry) = 0;
  // nullptr: unknown, expired or another owner's.
  virtual StatusOr<std::shared_ptr<const StoredResponse>> Get(const std::string& id, const std::string& owner) = 0;
  // Whether it existed (and was the owner's).
  virtual StatusOr<bool> Delete(const std::string& id, const std::string& owner) = 0;
  virtual const char* kind() const = 0;  // "redis"; server_info's responses_store
};

struct ResponseStoreOptions {
  size_t max_bytes = size_t{256} << 20;  // 0: nothing is stored (previous_response_id then always 404)
  // Finished responses go here instead of the LRU (max_bytes then unused).
  std::shared_ptr<SharedResponseStore> shared;
  // Runs a shared store's write off the caller's thread (the I/O strand that
  // finishes a response); unset: inline. Until the write lands the entry is
  // served from this process.
  std::function<void(std::function<void()>)> run_blocking;
};

class ResponseStore {
 public:
  explicit ResponseStore(ResponseStoreOptions options);

  // A response whose generation has started: `snapshot.response` is its
  // Response object in progress (conversation empty); `cancel` aborts the
  // generation (any thread, idempotent). `store`: whether GET may show it
  // while in flight and whether Complete keeps it.
  void Begin(StoredResponse snapshot, bool store, std::function<void()> cancel);
  // The generation ended: the in-flight entry goes; `entry` is kept when it
  // fits the cap (older entries evicted first), else dropped.
  void Complete(StoredResponse entry);
  // The generation ended without a Response (failed, client gone).
  void Abandon(const std::string& id);
  // Writes, on the calling thread, the shared store's writes that
  // run_blocking has not run (at shutdown, once it runs nothing more).
  void FlushWrites();

  // The stored (or stored-and-in-flight) response; nullptr when unknown or
  // another owner's; the shared store's error (UNAVAILABLE) when it cannot say.
  StatusOr<std::shared_ptr<const StoredResponse>> Find(const std::string& id, const std::string& owner);
  // True when it existed (stored or in flight) and was the owner's; an
  // in-flight one is also cancelled and not stored when it ends.
  StatusOr<bool> Erase(const std::string& id, const std::string& owner);
  // Find / Erase with an error read as "not found" (counted in errors()).
  std::shared_ptr<const StoredResponse> Get(const std::string& id, const std::string& owner);
  bool Delete(const std::string& id, const std::string& owner);
  enum class CancelResult { kNotFound, kCancelled, kNotInProgress };
  // Aborts an in-flight response's generation; it ends with status
  // "cancelled". `*snapshot`: the Response object as known now.
  CancelResult Cancel(const std::string& id, const std::string& owner, Json* snapshot);
  // Whether Cancel was called for `id` while in flight (the renderer asks
  // when its generation ends with an abort).
  bool CancelRequested(const std::string& id);

  // Shared store failures: writes skipped (unavailable, over its size cap)
  // and reads that could not be answered.
  int64_t errors() const;
  const char* kind() const { return options_.shared ? options_.shared->kind() : "memory"; }
  size_t bytes() const;
  size_t size() const;
  // An entry's charge against the cap: its JSON text's length plus a fixed overhead.
  static size_t EntryBytes(const StoredResponse& entry);

 private:
  struct InFlight {
    std::shared_ptr<StoredResponse> snapshot;
    bool store = true;
    bool cancelled = false;
    bool deleted = false;
    std::function<void()> cancel;
  };
  struct Slot {
    std::shared_ptr<const StoredResponse> entry;
    size_t bytes = 0;
    std::list<std::string>::iterator lru;  // position in lru_ (front: most recent)
  };
  void EvictTo(size_t budget);  // mu_ held
  void WriteShared(std::shared_ptr<const StoredResponse> entry);
  void CountError(const Status& s);

  const ResponseStoreOptions options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Slot> stored_;
  std::list<std::string> lru_;
  std::unordered_map<std::string, InFlight> in_flight_;
  // Finished, on their way to the shared store (served from here meanwhile).
  std::unordered_map<std::string, std::shared_ptr<const StoredResponse>> writing_;
  size_t bytes_ = 0;
  int64_t errors_ = 0;
};

}  // namespace tessera::responses
