#include "engine/kv_tiers/async_kv_store.h"

#include <utility>

namespace tessera::kv_tiers {

AsyncKvStore::AsyncKvStore(std::shared_ptr<KvBlockStore> store, AsyncKvStoreOptions options)
    : store_(std::move(store)), options_(options) {
  if (options_.num_workers < 1) options_.num_workers = 1;
  if (options_.max_pending < 1) options_.max_pending = 1;
  for (int i = 0; i < options_.num_workers; ++i) workers_.emplace_back([this] { Work(); });
}

AsyncKvStore::~AsyncKvStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

bool AsyncKvStore::Submit(std::function<void()> op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || static_cast<int64_t>(queue_.size()) >= options_.max_pending) {
      ++stats_.rejected;
      return false;
    }
    queue_.push_back(std::move(op));
    ++stats_.submitted;
  }
  cv_.notify_one();
  return true;
}

bool AsyncKvStore::Put(KvBlockKey key, std::string bytes, PutDone done) {
  return Submit([this, key = std::move(key), bytes = std::move(bytes), done = std::move(done)] {
    Status s = store_->Put(key, bytes);
    if (done) done(std::move(s));
  });
}

bool AsyncKvStore::Get(KvBlockKey key, GetDone done) {
  return Submit([this, key = std::move(key), done = std::move(done)] { done(store_->Get(key)); });
}

bool AsyncKvStore::Contains(KvBlockKey key, ContainsDone done) {
  return Submit([this, key = std::move(key), done = std::move(done)] { done(store_->Contains(key)); });
}

void AsyncKvStore::Work() {
  for (;;) {
    std::function<void()> op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      op = std::move(queue_.front());
      queue_.pop_front();
      ++running_;
    }
    op();
    {
      std::lock_guard<std::mutex> lock(mu_);
      --running_;
      ++stats_.completed;
      if (queue_.empty() && running_ == 0) idle_cv_.notify_all();
    }
  }
}

void AsyncKvStore::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
}

AsyncKvStoreStats AsyncKvStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  AsyncKvStoreStats s = stats_;
  s.pending = static_cast<int64_t>(queue_.size()) + running_;
  return s;
}

}  // namespace tessera::kv_tiers
