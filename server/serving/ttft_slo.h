// SLO-aware admission (--ttft-slo-ms; docs/architecture.md, "Server"): each
// arriving request's time to first token is predicted from the queue as it
// stands (runtime/sim/ttft_predictor.h, with the --cost-model coefficients);
// one that would miss the SLO is refused with RESOURCE_EXHAUSTED (HTTP 429,
// Retry-After: when the queue ahead would have drained) instead of waiting in a
// queue it cannot get through in time.
//
// The queue is a handful of atomic counters, never the scheduler's state:
// admitted requests add their prompt's tokens and attention until their first
// token (or their end), and the engine loop publishes each step's decode count
// and context (OnStep). Prefix-cache hits are not known at admission, so a
// cached prompt counts as uncomputed: the prediction is an upper bound there.
//
// Thread-safety: every method is thread-safe; Admit and Leave are a few atomic
// operations (O(1), fine on an I/O thread), the attainment window takes a
// mutex for a few adds.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>

#include "common/status.h"
#include "runtime/sim/cost_model.h"
#include "runtime/sim/ttft_predictor.h"

namespace tessera {

class ServingMetrics;

struct TtftSloOptions {
  double slo_ms = 0;                                   // > 0
  std::shared_ptr<const sim::LinearCostModel> model;   // the --cost-model file; not null
};

// What one admitted request added to the queue (Leave takes it back).
struct TtftSloShare {
  int64_t tokens = 0;
  int64_t attention = 0;
};

class TtftSlo {
 public:
  // `metrics` (may be null; not owned) gets each prediction, each refusal and
  // the attainment.
  TtftSlo(TtftSloOptions options, int64_t max_num_batched_tokens, ServingMetrics* metrics);

  // Predicts the TTFT of a `prompt_tokens` prompt behind the queue. Within the
  // SLO: its share joins the queue (pass it to Leave once). Beyond:
  // RESOURCE_EXHAUSTED naming the SLO and the prediction, its message ending in
  // "retry after N s" (ErrorFromStatus's Retry-After). `engine_idle`: no
  // request is in flight, so the last step's decodes are gone.
  StatusOr<TtftSloShare> Admit(int64_t prompt_tokens, bool engine_idle);
  // The request got its first token, failed or ended: its share leaves the
  // queue. Call once per admitted share.
  void Leave(const TtftSloShare& share);
  // Loop thread: the decodes of the step that just ran.
  void OnStep(const sim::StepShape& shape);
  // Fraction of the predictions of the last kWindowSeconds within the SLO
  // (1 when there were none): tessera:predicted_slo_attainment.
  double Attainment() const;
  double slo_seconds() const { return slo_s_; }

  static constexpr int kWindowSeconds = 60;

 private:
  void Record(bool met);

  const double slo_s_;
  const double slo_ms_;
  const std::shared_ptr<const sim::LinearCostModel> model_;
  const int64_t max_num_batched_tokens_;
  ServingMetrics* const metrics_;
  std::atomic<int64_t> queued_tokens_{0};
  std::atomic<int64_t> queued_attention_{0};
  std::atomic<int64_t> num_decodes_{0};
  std::atomic<int64_t> decode_context_{0};
  // The window: one bucket per second (by steady-clock second), reused round-robin.
  struct Bucket {
    int64_t second = -1;
    int64_t total = 0;
    int64_t met = 0;
  };
  mutable std::mutex mu_;
  std::array<Bucket, kWindowSeconds> window_;  // guarded by mu_
};

}  // namespace tessera
