// MaskWorker: one persistent thread that runs the structured-output mask job
// of a decode step while the engine thread runs the forward pass (it replaces
// a std::async thread started per step). One job at a time: Start, then Wait
// before the next Start. Start/Wait are called from one thread (the engine
// loop's); the job runs on the worker's.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace tessera {

class MaskWorker {
 public:
  MaskWorker() = default;  // the thread starts on the first Start
  ~MaskWorker();
  MaskWorker(const MaskWorker&) = delete;
  MaskWorker& operator=(const MaskWorker&) = delete;

  void Start(std::function<void()> job);
  void Wait();  // until the started job has run (returns at once if none)

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;  // set: pending or running
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tessera
