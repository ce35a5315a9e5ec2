#include "server/router/proxy_pool.h"
#include "common/log.h"

#include <atomic>
#include <exception>


namespace tessera {

struct ProxyPool::State {
  std::atomic<int64_t> pending{0};
  std::atomic<int64_t> rejected{0};
};

ProxyPool::ProxyPool(ProxyPoolOptions options) : options_(options), state_(std::make_shared<State>()) {}

ProxyPool::~ProxyPool() {
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    workers.swap(workers_);
  }
  cv_.notify_all();
  for (std::thread& t : workers) t.join();
}

ProxyPool::Slot ProxyPool::TryAcquire() {
  std::shared_ptr<State> s = state_;
  int64_t held = s->pending.load();
  do {
    if (held >= options_.max_pending) {
      s->rejected.fetch_add(1);
      return nullptr;
    }
  } while (!s->pending.compare_exchange_weak(held, held + 1));
  // The deleter keeps the counters alive however long the slot lives.
  return Slot(static_cast<void*>(s.get()), [s](void*) { s->pending.fetch_sub(1); });
}

void ProxyPool::Submit(Slot slot, std::function<void()> job) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) return;  // the slot is released on return; the exchange answers 500 when dropped
  queue_.push_back([slot = std::move(slot), job = std::move(job)]() mutable {
    job();
    job = nullptr;  // what the job captured (its exchange) goes before the slot
    slot.reset();
  });
  // Every unclaimed job gets an idle worker or a new one (while under the
  // cap): a burst never queues behind long streams while threads are allowed.
  if (static_cast<int64_t>(queue_.size()) > idle_ && static_cast<int>(workers_.size()) < options_.workers) {
    workers_.emplace_back([this] { WorkerLoop(); });
    return;
  }
  lock.unlock();
  cv_.notify_one();
}

void ProxyPool::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    ++idle_;
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    --idle_;
    if (queue_.empty()) return;  // stopping, nothing left
    std::function<void()> job = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.unlock();
    try {
      job();
    } catch (const std::exception& e) {
      LogError("router: a proxied request threw: {}", e.what());
    } catch (...) {
      LogError("router: a proxied request threw");
    }
    job = nullptr;
    lock.lock();
    --running_;
  }
}

int64_t ProxyPool::pending() const { return state_->pending.load(); }
int64_t ProxyPool::rejected() const { return state_->rejected.load(); }

int64_t ProxyPool::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

int ProxyPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(workers_.size());
}

}  // namespace tessera
