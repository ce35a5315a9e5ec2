#include "runtime/kv_puller.h"

#include <utility>

namespace tessera {
namespace {

Status Stopping() { return Status(StatusCode::kCancelled, "kv transfer: the engine is stopping"); }

}  // namespace

KvPuller::KvPuller(KvTransport* transport, std::function<void()> notify)
    : transport_(transport), notify_(std::move(notify)) {
  thread_ = std::thread([this] { ThreadMain(); });
}

KvPuller::~KvPuller() { Stop(); }

void KvPuller::Submit(uint64_t id, KvPullSpec spec) {
  {
    std::lock_guard lock(mu_);
    if (stop_) {
      done_.push_back({id, Stopping()});
      return;
    }
    queue_.push_back({id, std::move(spec), false});
  }
  cv_.notify_all();
}

void KvPuller::Release(std::string host, int port, std::string handle) {
  Job job;
  job.spec.host = std::move(host);
  job.spec.port = port;
  job.spec.handle = std::move(handle);
  job.release = true;
  {
    std::lock_guard lock(mu_);
    if (stop_) return;
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
}

std::vector<KvPuller::Done> KvPuller::TakeDone() {
  std::lock_guard lock(mu_);
  std::vector<Done> out;
  out.swap(done_);
  return out;
}

void KvPuller::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void KvPuller::ThreadMain() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) {
      for (const Job& j : queue_) {
        if (!j.release) done_.push_back({j.id, Stopping()});
      }
      queue_.clear();
      break;
    }
    Job job = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    if (job.release) {
      transport_->Release(job.spec.host, job.spec.port, job.spec.handle);
      lock.lock();
      continue;
    }
    Done d{job.id, transport_->Pull(job.spec)};
    lock.lock();
    done_.push_back(std::move(d));
    if (notify_) {
      lock.unlock();
      notify_();
      lock.lock();
    }
  }
  lock.unlock();
  if (notify_) notify_();
}

}  // namespace tessera
