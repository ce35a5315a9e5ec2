// EngineWorker: the one engine thread behind `tessera serve`.
//
// It owns the Backend, Model, KV cache and BatchBuilder; nothing else touches
// them (DESIGN §1: the front end never touches the model, the engine loop never
// blocks on I/O). Front-end threads Submit() jobs; the thread loads the model,
// runs a warm-up step, then runs queued jobs one at a time, greedy decoding
// each to completion and freeing its KV blocks.
//
// This is the stage before the scheduler: continuous batching (many requests
// per step, chunked prefill interleaved with decode, preemption, prefix
// caching) replaces the one-request-at-a-time loop in a later issue.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "engine/model_config.h"

namespace tessera {

class Backend;
class BatchBuilder;
class KvCache;
class Model;

struct EngineOptions {
  // Returns the checkpoint directory; runs on the engine thread, so it may
  // take long (e.g. synthesising the default model on first run).
  std::function<StatusOr<std::string>()> resolve_model_dir;
  int threads = 0;              // CPU backend threads, 0 = all
  int64_t num_kv_blocks = 0;    // 0: sized automatically (see Load)
  int64_t max_model_len = 0;    // 0: the model's max_position_embeddings (clamped to the KV cache)
  int64_t block_size = 16;
  int64_t prefill_chunk = 512;  // prompt tokens per forward step (bounds workspace memory)
  size_t max_queued = 1024;     // Submit beyond this is refused (429)
  // Automatic KV sizing: room for this many max-length sequences, capped at
  // kv_budget_bytes of KV memory.
  int64_t auto_kv_sequences = 8;
  int64_t kv_budget_bytes = int64_t{2} << 30;
};

// What the front end needs to validate requests; immutable once ready.
struct EngineInfo {
  std::string model_dir;
  ModelConfig config;
  int64_t max_model_len = 0;
  int64_t num_kv_blocks = 0;
  int64_t block_size = 0;
  std::vector<int64_t> eos_token_ids;  // config.json and generation_config.json
};

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;
};

struct GenerateResult {
  Status status;
  std::vector<int32_t> tokens;  // generated ids, including a final eos token
  bool hit_eos = false;         // finish_reason "stop" (else "length")
  double queue_ms = 0, run_ms = 0;
};

enum class EngineState { kLoading, kReady, kFailed };

class EngineWorker {
 public:
  explicit EngineWorker(EngineOptions options);
  ~EngineWorker();  // Stop()
  EngineWorker(const EngineWorker&) = delete;
  EngineWorker& operator=(const EngineWorker&) = delete;

  struct Hooks {
    // After warm-up, before the state turns ready (engine thread). An error
    // fails startup.
    std::function<Status(const EngineInfo&)> before_ready;
    // Startup failed (engine thread).
    std::function<void(const Status&)> on_failed;
  };
  // Starts the engine thread. Call once.
  void Start(Hooks hooks);

  // Thread-safe.
  EngineState state() const { return state_.load(std::memory_order_acquire); }
  // Valid (and immutable) once state() == kReady.
  const EngineInfo& info() const { return info_; }

  // Queues a job; `done` later runs on the engine thread and must not block.
  // Fails with ResourceExhausted when the queue is full, Unavailable when not
  // ready or stopping (then `done` is never called). Thread-safe.
  Status Submit(GenerateRequest request, std::function<void(GenerateResult)> done);
  // Jobs queued or running. Thread-safe.
  size_t pending() const;

  // Finishes every queued job (or, with abandon_queued, drops those not yet
  // started without calling their `done`), then joins the thread. If the model
  // is still loading this waits for the load to end.
  void Stop(bool abandon_queued = false);

 private:
  struct Job {
    GenerateRequest request;
    std::function<void(GenerateResult)> done;
    std::chrono::steady_clock::time_point queued_at;
  };
  void Run(Hooks hooks);
  Status Load();
  Status WarmUp();
  GenerateResult Generate(const GenerateRequest& request);
  // Appends `tokens` to `seq` in chunks and returns the argmax after the last.
  StatusOr<int32_t> StepArgmax(int seq, const std::vector<int32_t>& tokens);
  void ResetBuilderIfNeeded();

  const EngineOptions options_;
  std::atomic<EngineState> state_{EngineState::kLoading};
  EngineInfo info_;  // written by the engine thread before state_ turns ready

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;  // guarded by mu_
  bool stopping_ = false;  // guarded by mu_
  bool running_job_ = false;  // guarded by mu_
  std::thread thread_;

  // Engine-thread only.
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<BatchBuilder> builder_;
  int64_t sequences_started_ = 0;
  std::vector<float> logits_;
};

}  // namespace tessera
