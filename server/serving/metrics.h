// ServingMetrics: the Prometheus metrics of `tessera serve`, on prometheus-cpp,
// named after vLLM's (prefix "tessera:" instead of "vllm:") so existing
// dashboards carry over with a find-and-replace. Every metric carries a
// model_name label.
//
// Threading: all methods are thread-safe (prometheus-cpp metrics are atomic;
// the scheduler snapshot delta is taken under a mutex).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <map>
#include <string>
#include <vector>

#include "engine/moe/expert_load.h"
#include "runtime/kv_tiers/kv_tier_manager.h"
#include "scheduler/cache_waterfall.h"
#include "scheduler/request.h"
#include "scheduler/scheduler_metrics.h"

namespace prometheus {
class Counter;
class Gauge;
class Histogram;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace tessera {

class ServingMetrics {
 public:
  explicit ServingMetrics(const std::string& model_name);
  ~ServingMetrics();

  // Per request, from the front end's view of its stream.
  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
  void ObserveE2eLatency(double seconds);
  void ObserveQueueTime(double seconds);  // arrival -> first scheduled
  void ObserveRequestTokens(int64_t prompt_tokens, int64_t generation_tokens);
  // A finished request's prompt account: tessera:prompt_tokens_cached_total{source}
  // and tessera:prompt_tokens_computed_total{reason} (docs/architecture.md, "Cache waterfall").
  void ObserveCacheWaterfall(const CacheWaterfall& waterfall);
  void RequestFinished(FinishReason reason);
  // HTTP/gRPC requests refused before reaching the engine, by reason label
  // (e.g. "invalid", "queue_full", "unauthorized", "draining").
  void RequestRejected(const std::string& reason);

  // Copies the engine loop's snapshot: gauges are set, counters advance by the
  // difference to the previous snapshot. Call before Serialize.
  void UpdateFromScheduler(const SchedulerMetrics& snapshot);
  // MoE models: tessera:moe_expert_tokens_total{layer, expert} advances to the
  // engine's counts. Series are bounded: past kMaxExpertSeries (layers x
  // experts) the counts are summed over layers and exported with layer="all".
  // Expert parallelism adds tessera:moe_expert_rank_tokens_total{layer,
  // expert, rank} (the same pairs by the rank that computed them) and
  // tessera:eplb_rebalances_total.
  void UpdateExpertLoad(const ExpertLoad& load);
  // Disaggregation, decode side: one successful KV pull (bytes, latency).
  // Blocks pulled vs reused and failures come with UpdateFromScheduler.
  void ObserveKvPull(int64_t bytes, double seconds);
  // One engine step that ran a plan: tessera:step_time_seconds; with a cost
  // model (predicted_seconds >= 0) also tessera:step_time_prediction_error,
  // (predicted - measured) / measured.
  void ObserveStepTime(double seconds, double predicted_seconds);
  // --ttft-slo-ms (ttft_slo.h): registers tessera:predicted_ttft_seconds,
  // tessera:slo_rejections_total and tessera:predicted_slo_attainment (absent
  // without it, so an autoscaler never reads an attainment nobody predicts).
  // Call before serving; the two below are no-ops until then.
  void EnableTtftSlo();
  void ObserveTtftPrediction(double predicted_seconds, bool rejected);
  void SetPredictedSloAttainment(double fraction);
  static constexpr int64_t kMaxExpertSeries = 4096;
  // Parallel groups: tessera:parallel_step_seconds_total{rank} and
  // tessera:parallel_collective_seconds_total{rank} advance to each rank's
  // cumulative step and collective (communication) seconds.
  void UpdateRankTimes(const std::vector<double>& step_seconds, const std::vector<double>& collective_seconds);

  // KV tiers (--kv-offload-*): per tier {tier="host|disk|redis"} blocks hit /
  // missed / stored and their bytes, errors by kind (unavailable, corrupt,
  // spill_failed, spill_skipped, bad_size), evictions, bytes held; counters
  // advance to the snapshot. ObserveKvTierOp feeds the latency histograms.
  void UpdateKvTiers(const std::vector<KvTierStats>& tiers, const KvTierTotals& totals);
  void ObserveKvTierOp(const std::string& tier, KvTierOp op, double seconds);

  // The Prometheus text exposition format (version 0.0.4).
  std::string Serialize() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Histogram* e2e_;
  prometheus::Histogram* queue_;
  prometheus::Histogram* prompt_tokens_hist_;
  prometheus::Histogram* generation_tokens_hist_;
  prometheus::Counter* prompt_tokens_;
  std::array<prometheus::Counter*, kNumCacheSources> cached_by_source_{};
  std::array<prometheus::Counter*, kNumComputeReasons> computed_by_reason_{};
  prometheus::Counter* generation_tokens_;
  prometheus::Counter* success_stop_;
  prometheus::Counter* success_length_;
  prometheus::Counter* success_abort_;
  prometheus::Family<prometheus::Counter>* rejected_;
  std::string model_name_;
  prometheus::Histogram* kv_pull_seconds_;
  prometheus::Histogram* kv_pull_bytes_;
  prometheus::Histogram* step_seconds_;
  prometheus::Histogram* step_prediction_error_;
  prometheus::Histogram* predicted_ttft_ = nullptr;  // set once by EnableTtftSlo
  prometheus::Counter* slo_rejections_ = nullptr;
  prometheus::Gauge* slo_attainment_ = nullptr;
  prometheus::Counter* kv_bytes_total_;
  prometheus::Counter* kv_blocks_pulled_;
  prometheus::Counter* kv_blocks_reused_;
  prometheus::Counter* kv_pull_failures_;
  prometheus::Gauge* kv_exported_;
  prometheus::Gauge* running_;
  prometheus::Gauge* waiting_;
  prometheus::Gauge* kv_usage_;
  prometheus::Gauge* prefix_hit_rate_;
  prometheus::Counter* prefix_queries_;
  prometheus::Counter* prefix_hits_;
  prometheus::Counter* preemptions_;
  prometheus::Counter* steps_;
  // Speculative decoding (vLLM's spec_decode_* names).
  prometheus::Counter* spec_drafts_;
  prometheus::Counter* spec_draft_tokens_;
  prometheus::Counter* spec_accepted_tokens_;
  prometheus::Family<prometheus::Counter>* spec_accepted_per_pos_;
  prometheus::Family<prometheus::Counter>* expert_tokens_;
  std::mutex mu_;
  SchedulerCounters last_;       // guarded by mu_
  SpecDecodeCounters last_spec_;  // guarded by mu_
  std::vector<int64_t> last_expert_;               // guarded by mu_: counts exported so far
  prometheus::Family<prometheus::Counter>* rank_step_;
  prometheus::Family<prometheus::Counter>* rank_collective_;
  std::vector<double> last_step_, last_collective_;  // guarded by mu_
  std::vector<prometheus::Counter*> expert_series_;  // guarded by mu_: one per exported count
  // KV tiers.
  prometheus::Family<prometheus::Counter>* tier_hits_;
  prometheus::Family<prometheus::Counter>* tier_misses_;
  prometheus::Family<prometheus::Counter>* tier_hit_bytes_;
  prometheus::Family<prometheus::Counter>* tier_stored_;
  prometheus::Family<prometheus::Counter>* tier_stored_bytes_;
  prometheus::Family<prometheus::Counter>* tier_errors_;
  prometheus::Family<prometheus::Counter>* tier_rejected_;
  prometheus::Family<prometheus::Counter>* tier_evictions_;
  prometheus::Family<prometheus::Gauge>* tier_usage_;
  // Retention (docs/architecture.md, "Retention").
  prometheus::Family<prometheus::Gauge>* retained_blocks_;       // {tier}: pool, host, disk
  prometheus::Counter* retention_too_large_;                    // {reason="too_large"}: 400
  prometheus::Counter* retention_full_;                         // {reason="budget_full"}: 429
  prometheus::Family<prometheus::Histogram>* tier_seconds_;
  prometheus::Counter* tier_loaded_tokens_;
  prometheus::Counter* tier_fetches_;
  prometheus::Counter* tier_fetches_refused_;
  std::map<std::string, KvTierStats> last_tier_;  // guarded by mu_
  KvTierTotals last_tier_totals_;                 // guarded by mu_
  // Expert parallelism: pairs by computing rank; EPLB rebalances (guarded by mu_).
  prometheus::Family<prometheus::Counter>* expert_rank_tokens_;
  prometheus::Counter* eplb_rebalances_;
  std::vector<prometheus::Counter*> rank_series_;
  std::vector<int64_t> last_rank_expert_;
  int64_t last_rebalances_ = 0;
};

}  // namespace tessera
