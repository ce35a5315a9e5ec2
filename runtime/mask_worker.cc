#include "runtime/mask_worker.h"

namespace tessera {

MaskWorker::~MaskWorker() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void MaskWorker::Start(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    job_ = std::move(job);
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  cv_.notify_all();
}

void MaskWorker::Wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return !job_; });
}

void MaskWorker::Run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || job_; });
    if (stop_ && !job_) return;
    std::function<void()> job = job_;
    lock.unlock();
    job();
    lock.lock();
    job_ = nullptr;
    cv_.notify_all();
  }
}

}  // namespace tessera
