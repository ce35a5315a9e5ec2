#include "server/serving/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace tessera {

namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// vLLM's buckets, so dashboards' quantile panels line up.
const Histogram::BucketBoundaries kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                                  0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0,
                                                  640.0, 2560.0};
const Histogram::BucketBoundaries kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                                 0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const Histogram::BucketBoundaries kLatencyBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,
                                                     15.0, 20.0, 30.0, 40.0, 50.0,  60.0,  120.0, 240.0, 480.0,
                                                     960.0, 1920.0, 7680.0};
const Histogram::BucketBoundaries kTokenBuckets = {1,    2,    5,     10,    20,    50,     100,    200,
                                                   500,  1000, 2000,  5000,  10000, 20000,  50000, 100000};

}  // namespace

ServingMetrics::ServingMetrics(const std::string& model_name)
    : registry_(std::make_shared<prometheus::Registry>()), model_name_(model_name) {
  const prometheus::Labels labels = {{"model_name", model_name}};
  auto& r = *registry_;
  auto histogram = [&](const char* name, const char* help, const Histogram::BucketBoundaries& buckets) {
    return &BuildHistogram().Name(name).Help(help).Register(r).Add(labels, buckets);
  };
  auto counter = [&](const char* name, const char* help) {
    return &BuildCounter().Name(name).Help(help).Register(r).Add(labels);
  };
  auto gauge = [&](const char* name, const char* help) {
    return &BuildGauge().Name(name).Help(help).Register(r).Add(labels);
  };
  ttft_ = histogram("tessera:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                    kTtftBuckets);
  itl_ = histogram("tessera:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                   kItlBuckets);
  e2e_ = histogram("tessera:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
                   kLatencyBuckets);
  queue_ = histogram("tessera:request_queue_time_seconds",
                     "Histogram of time spent waiting before first scheduled, in seconds.", kLatencyBuckets);
  prompt_tokens_hist_ = histogram("tessera:request_prompt_tokens", "Number of prefill tokens processed per request.",
                                  kTokenBuckets);
  generation_tokens_hist_ = histogram("tessera:request_generation_tokens",
                                      "Number of generation tokens processed per request.", kTokenBuckets);
  prompt_tokens_ = counter("tessera:prompt_tokens_total", "Number of prefill tokens processed.");
  auto& cached = BuildCounter()
                     .Name("tessera:prompt_tokens_cached_total")
                     .Help("Prompt tokens served from a cache, by where they came from (pool, host, disk, redis, peer).")
                     .Register(r);
  for (size_t i = 0; i < kNumCacheSources; ++i) {
    const std::string source(CacheSourceName(static_cast<CacheSource>(i)));
    cached_by_source_[i] = &cached.Add({{"model_name", model_name}, {"source", source}});
  }
  auto& computed = BuildCounter()
                       .Name("tessera:prompt_tokens_computed_total")
                       .Help("Prompt tokens computed, by why no cache served them (no_prefix, evicted, not_written, "
                             "routed_elsewhere, tail).")
                       .Register(r);
  for (size_t i = 0; i < kNumComputeReasons; ++i) {
    const std::string reason(ComputeReasonName(static_cast<ComputeReason>(i)));
    computed_by_reason_[i] = &computed.Add({{"model_name", model_name}, {"reason", reason}});
  }
  generation_tokens_ = counter("tessera:generation_tokens_total", "Number of generation tokens processed.");
  auto& success = BuildCounter()
                      .Name("tessera:request_success_total")
                      .Help("Count of successfully processed requests, by finish reason.")
                      .Register(r);
  success_stop_ = &success.Add({{"model_name", model_name}, {"finished_reason", "stop"}});
  success_length_ = &success.Add({{"model_name", model_name}, {"finished_reason", "length"}});
  success_abort_ = &success.Add({{"model_name", model_name}, {"finished_reason", "abort"}});
  rejected_ = &BuildCounter()
                   .Name("tessera:request_rejected_total")
                   .Help("Requests refused before reaching the engine, by reason.")
                   .Register(r);
  kv_pull_seconds_ = histogram("tessera:kv_transfer_seconds",
                               "Disaggregation: time of one KV pull from a prefill instance (handshake to ack).",
                               {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0});
  kv_pull_bytes_ = histogram("tessera:kv_transfer_bytes", "Disaggregation: bytes of KV moved by one pull.",
                             {4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864, 268435456,
                              1073741824});
  step_seconds_ = histogram("tessera:step_time_seconds", "Engine steps: measured time of one step that ran a plan.",
                            {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0});
  step_prediction_error_ =
      histogram("tessera:step_time_prediction_error",
                "Engine steps with --cost-model: relative error of the cost model's predicted step time, "
                "(predicted - measured) / measured.",
                {-0.9, -0.5, -0.3, -0.2, -0.15, -0.1, -0.05, 0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0, 5.0});
  kv_bytes_total_ = counter("tessera:kv_transfer_bytes_total", "Disaggregation: KV bytes pulled from prefill instances.");
  auto& blocks = BuildCounter()
                     .Name("tessera:kv_transfer_blocks_total")
                     .Help("Disaggregation: prompt blocks pulled from a prefill instance (source=\"pulled\") or "
                           "found in the local prefix cache instead (source=\"reused\").")
                     .Register(r);
  kv_blocks_pulled_ = &blocks.Add({{"model_name", model_name}, {"source", "pulled"}});
  kv_blocks_reused_ = &blocks.Add({{"model_name", model_name}, {"source", "reused"}});
  kv_pull_failures_ = counter("tessera:kv_transfer_failures_total",
                              "Disaggregation: KV pulls that failed (the prompt was computed here instead).");
  kv_exported_ = gauge("tessera:kv_exported_requests",
                       "Disaggregation, prefill side: requests whose KV blocks are pinned for a decode instance.");
  running_ = gauge("tessera:num_requests_running", "Number of sequences in model execution batches.");
  waiting_ = gauge("tessera:num_requests_waiting", "Number of sequences waiting to be processed.");
  kv_usage_ = gauge("tessera:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.");
  prefix_hit_rate_ = gauge("tessera:prefix_cache_hit_rate", "Prefix cache hit rate since start (hits / queries).");
  prefix_queries_ = counter("tessera:prefix_cache_queries_total",
                            "Prefix cache queries, in terms of number of queried tokens.");
  prefix_hits_ = counter("tessera:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.");
  preemptions_ = counter("tessera:num_preemptions_total", "Cumulative number of preemptions from the engine.");
  steps_ = counter("tessera:engine_steps_total", "Engine loop steps (forward passes) run.");
  spec_drafts_ = counter("tessera:spec_decode_num_drafts_total", "Number of spec decoding drafts.");
  spec_draft_tokens_ = counter("tessera:spec_decode_num_draft_tokens_total", "Number of draft tokens.");
  spec_accepted_tokens_ = counter("tessera:spec_decode_num_accepted_tokens_total", "Number of accepted tokens.");
  spec_accepted_per_pos_ = &BuildCounter()
                                .Name("tessera:spec_decode_num_accepted_tokens_per_pos_total")
                                .Help("Accepted tokens per draft position.")
                                .Register(r);
  expert_tokens_ = &BuildCounter()
                        .Name("tessera:moe_expert_tokens_total")
                        .Help("MoE models: tokens routed to each expert of each MoE layer (one per token and "
                              "chosen expert; layer=\"all\" sums the layers when there are too many series).")
                        .Register(r);
  auto family = [&](const char* name, const char* help) { return &BuildCounter().Name(name).Help(help).Register(r); };
  tier_hits_ = family("tessera:kv_offload_hits_total", "KV tiers: blocks found in the tier (loaded back, checked).");
  tier_misses_ = family("tessera:kv_offload_misses_total",
                        "KV tiers: block lookups the tier could not answer (absent, bad, or unreachable).");
  tier_hit_bytes_ = family("tessera:kv_offload_hit_bytes_total", "KV tiers: bytes of the blocks found in the tier.");
  tier_stored_ = family("tessera:kv_offload_stored_blocks_total", "KV tiers: blocks written to the tier.");
  tier_stored_bytes_ = family("tessera:kv_offload_stored_bytes_total", "KV tiers: bytes written to the tier.");
  tier_errors_ = family("tessera:kv_offload_errors_total",
                        "KV tiers: failures by kind: unavailable (tier unreachable), corrupt (a record failed its "
                        "checks and was dropped), bad_size, spill_failed, spill_skipped (write queue full).");
  tier_evictions_ = family("tessera:kv_offload_evictions_total", "KV tiers: blocks evicted to stay within the bound.");
  tier_rejected_ = family("tessera:kv_offload_rejected_records_total",
                          "KV tiers: records refused because their MAC is not the deployment secret's "
                          "(--kv-offload-secret-file): planted or altered blocks, dropped and recomputed.");
  tier_usage_ = &BuildGauge()
                     .Name("tessera:kv_offload_usage_bytes")
                     .Help("KV tiers: bytes held by the tier (host, disk; 0 for a shared Redis).")
                     .Register(r);
  tier_seconds_ = &BuildHistogram()
                       .Name("tessera:kv_offload_seconds")
                       .Help("KV tiers: time to move one block, op=\"load\" (the tier's read and checks) or "
                             "op=\"spill\" (queued to stored).")
                       .Register(r);
  retained_blocks_ = &BuildGauge()
                          .Name("tessera:kv_retained_blocks")
                          .Help("Retention: blocks held for a retained prompt prefix, by tier (pool: the device "
                                "pool, in use or free; host, disk: pinned in that KV tier).")
                          .Register(r);
  auto& rejections = BuildCounter()
                         .Name("tessera:kv_retention_rejections_total")
                         .Help("Retention: requests refused by the retention budgets, reason=\"too_large\" (no "
                               "budget can ever hold the prefix: 400) or \"budget_full\" (held prefixes fill it now: "
                               "429).")
                         .Register(r);
  retention_too_large_ = &rejections.Add({{"model_name", model_name}, {"reason", "too_large"}});
  retention_full_ = &rejections.Add({{"model_name", model_name}, {"reason", "budget_full"}});
  tier_loaded_tokens_ = counter("tessera:kv_offload_loaded_tokens_total",
                                "KV tiers: prompt tokens whose KV was loaded from a tier instead of computed.");
  tier_fetches_ = counter("tessera:kv_offload_lookups_total",
                          "KV tiers: requests whose prompt blocks missing from the KV pool were looked up in the tiers.");
  tier_fetches_refused_ = counter("tessera:kv_offload_lookups_refused_total",
                                  "KV tiers: lookups refused because too many were in flight (prompt computed).");
  expert_rank_tokens_ = &BuildCounter()
                             .Name("tessera:moe_expert_rank_tokens_total")
                             .Help("Expert parallelism: (token, expert) pairs each rank computed for each expert "
                                   "of each MoE layer, i.e. the physical load of the replicas on that rank "
                                   "(layer=\"all\" sums the layers when there are too many series).")
                             .Register(r);
  eplb_rebalances_ = &BuildCounter()
                          .Name("tessera:eplb_rebalances_total")
                          .Help("Expert parallelism with --enable-eplb: expert placements rebalanced.")
                          .Register(r)
                          .Add({{"model_name", model_name_}});
  rank_step_ = &BuildCounter()
                    .Name("tessera:parallel_step_seconds_total")
                    .Help("Parallel groups: seconds each rank spent in engine steps.")
                    .Register(r);
  rank_collective_ = &BuildCounter()
                          .Name("tessera:parallel_collective_seconds_total")
                          .Help("Parallel groups: seconds each rank spent in collectives (all-reduce, "
                                "all-gather, all-to-all) within its steps.")
                          .Register(r);
}

ServingMetrics::~ServingMetrics() = default;

void ServingMetrics::UpdateRankTimes(const std::vector<double>& step, const std::vector<double>& coll) {
  std::lock_guard lock(mu_);
  last_step_.resize(step.size(), 0.0);
  last_collective_.resize(coll.size(), 0.0);
  for (size_t r = 0; r < step.size(); ++r) {
    const prometheus::Labels labels{{"model_name", model_name_}, {"rank", std::to_string(r)}};
    rank_step_->Add(labels).Increment(std::max(0.0, step[r] - last_step_[r]));
    last_step_[r] = step[r];
    if (r < coll.size()) {
      rank_collective_->Add(labels).Increment(std::max(0.0, coll[r] - last_collective_[r]));
      last_collective_[r] = coll[r];
    }
  }
}

void ServingMetrics::EnableTtftSlo() {
  if (predicted_ttft_ != nullptr) return;
  const prometheus::Labels labels = {{"model_name", model_name_}};
  auto& r = *registry_;
  predicted_ttft_ = &BuildHistogram()
                         .Name("tessera:predicted_ttft_seconds")
                         .Help("--ttft-slo-ms: time to first token predicted at admission from the queue and the "
                               "cost model, in seconds (refused requests included).")
                         .Register(r)
                         .Add(labels, kTtftBuckets);
  slo_rejections_ = &BuildCounter()
                         .Name("tessera:slo_rejections_total")
                         .Help("--ttft-slo-ms: requests refused (429) because their predicted time to first token "
                               "exceeded the SLO.")
                         .Register(r)
                         .Add(labels);
  slo_attainment_ = &BuildGauge()
                         .Name("tessera:predicted_slo_attainment")
                         .Help("--ttft-slo-ms: fraction of the last minute's admission predictions within the SLO "
                               "(1 with no arrivals); what the autoscaling overlay scales on.")
                         .Register(r)
                         .Add(labels);
  slo_attainment_->Set(1.0);
}

void ServingMetrics::ObserveTtftPrediction(double predicted_seconds, bool rejected) {
  if (predicted_ttft_ == nullptr) return;
  predicted_ttft_->Observe(predicted_seconds);
  if (rejected) slo_rejections_->Increment();
}

void ServingMetrics::SetPredictedSloAttainment(double fraction) {
  if (slo_attainment_ != nullptr) slo_attainment_->Set(fraction);
}

void ServingMetrics::ObserveTimeToFirstToken(double s) { ttft_->Observe(s); }
void ServingMetrics::ObserveInterTokenLatency(double s) { itl_->Observe(s); }
void ServingMetrics::ObserveE2eLatency(double s) { e2e_->Observe(s); }
void ServingMetrics::ObserveQueueTime(double s) { queue_->Observe(s); }

void ServingMetrics::ObserveRequestTokens(int64_t prompt_tokens, int64_t generation_tokens) {
  prompt_tokens_hist_->Observe(static_cast<double>(prompt_tokens));
  generation_tokens_hist_->Observe(static_cast<double>(generation_tokens));
  prompt_tokens_->Increment(static_cast<double>(prompt_tokens));
  generation_tokens_->Increment(static_cast<double>(generation_tokens));
}

void ServingMetrics::ObserveCacheWaterfall(const CacheWaterfall& w) {
  for (size_t i = 0; i < kNumCacheSources; ++i) {
    if (w.cached[i] > 0) cached_by_source_[i]->Increment(static_cast<double>(w.cached[i]));
  }
  for (size_t i = 0; i < kNumComputeReasons; ++i) {
    if (w.computed[i] > 0) computed_by_reason_[i]->Increment(static_cast<double>(w.computed[i]));
  }
}

void ServingMetrics::RequestFinished(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: success_stop_->Increment(); break;
    case FinishReason::kLength: success_length_->Increment(); break;
    default: success_abort_->Increment(); break;
  }
}

void ServingMetrics::RequestRejected(const std::string& reason) {
  rejected_->Add({{"model_name", model_name_}, {"reason", reason}}).Increment();
}

void ServingMetrics::UpdateFromScheduler(const SchedulerMetrics& m) {
  running_->Set(static_cast<double>(m.gauges.num_running));
  waiting_->Set(static_cast<double>(m.gauges.num_waiting));
  kv_usage_->Set(m.gauges.kv_usage);
  kv_exported_->Set(static_cast<double>(m.gauges.num_exported));
  retained_blocks_->Add({{"model_name", model_name_}, {"tier", "pool"}})
      .Set(static_cast<double>(m.gauges.retained_blocks));
  prefix_hit_rate_->Set(m.prefix_cache_hit_rate());
  std::lock_guard lock(mu_);
  const SchedulerCounters& c = m.counters;
  auto advance = [](prometheus::Counter* counter, int64_t now, int64_t before) {
    if (now > before) counter->Increment(static_cast<double>(now - before));
  };
  advance(prefix_queries_, c.prefix_cache_queries, last_.prefix_cache_queries);
  advance(prefix_hits_, c.prefix_cache_hits, last_.prefix_cache_hits);
  advance(preemptions_, c.preemptions, last_.preemptions);
  advance(steps_, c.steps, last_.steps);
  advance(kv_blocks_pulled_, c.kv_blocks_pulled, last_.kv_blocks_pulled);
  advance(kv_blocks_reused_, c.kv_blocks_reused, last_.kv_blocks_reused);
  advance(kv_pull_failures_, c.kv_pull_failures, last_.kv_pull_failures);
  advance(retention_too_large_, c.retention_rejected_too_large, last_.retention_rejected_too_large);
  advance(retention_full_, c.retention_rejected_full, last_.retention_rejected_full);
  last_ = c;
  const SpecDecodeCounters& sp = m.spec;
  advance(spec_drafts_, sp.num_drafts, last_spec_.num_drafts);
  advance(spec_draft_tokens_, sp.num_draft_tokens, last_spec_.num_draft_tokens);
  advance(spec_accepted_tokens_, sp.num_accepted_tokens, last_spec_.num_accepted_tokens);
  for (size_t i = 0; i < sp.num_accepted_tokens_per_pos.size(); ++i) {
    prometheus::Counter& pos = spec_accepted_per_pos_->Add({{"model_name", model_name_}, {"position", std::to_string(i)}});
    const int64_t before = i < last_spec_.num_accepted_tokens_per_pos.size() ? last_spec_.num_accepted_tokens_per_pos[i] : 0;
    advance(&pos, sp.num_accepted_tokens_per_pos[i], before);
  }
  last_spec_ = sp;
}

void ServingMetrics::UpdateExpertLoad(const ExpertLoad& load) {
  if (load.empty()) return;
  const int64_t experts = load.num_experts;
  const int64_t layers = static_cast<int64_t>(load.layers.size());
  const bool per_layer = layers * experts <= kMaxExpertSeries;
  std::vector<int64_t> now;
  if (per_layer) {
    now = load.counts;
  } else {
    now.assign(static_cast<size_t>(experts), 0);
    for (int64_t l = 0; l < layers; ++l) {
      for (int64_t e = 0; e < experts; ++e) now[e] += load.counts[l * experts + e];
    }
  }
  std::lock_guard lock(mu_);
  if (expert_series_.size() != now.size()) {  // first update (the model does not change)
    expert_series_.clear();
    for (int64_t l = 0; l < (per_layer ? layers : 1); ++l) {
      for (int64_t e = 0; e < experts; ++e) {
        const std::string layer = per_layer ? std::to_string(load.layers[l]) : "all";
        expert_series_.push_back(&expert_tokens_->Add(
            {{"model_name", model_name_}, {"layer", layer}, {"expert", std::to_string(e)}}));
      }
    }
    last_expert_.assign(now.size(), 0);
  }
  for (size_t i = 0; i < now.size(); ++i) {
    if (now[i] > last_expert_[i]) expert_series_[i]->Increment(static_cast<double>(now[i] - last_expert_[i]));
  }
  last_expert_ = std::move(now);
  if (load.world_size < 1 || load.rank_counts.empty()) return;
  // By computing rank, [layer][expert][rank] (or summed over layers).
  const int64_t n = load.world_size;
  const bool rank_per_layer = layers * experts * n <= kMaxExpertSeries;
  std::vector<int64_t> by_rank = load.rank_counts;
  if (!rank_per_layer) {
    by_rank.assign(static_cast<size_t>(experts * n), 0);
    for (int64_t l = 0; l < layers; ++l) {
      for (int64_t i = 0; i < experts * n; ++i) by_rank[i] += load.rank_counts[l * experts * n + i];
    }
  }
  if (rank_series_.size() != by_rank.size()) {
    rank_series_.clear();
    for (int64_t l = 0; l < (rank_per_layer ? layers : 1); ++l) {
      for (int64_t e = 0; e < experts; ++e) {
        for (int64_t r = 0; r < n; ++r) {
          rank_series_.push_back(&expert_rank_tokens_->Add(
              {{"model_name", model_name_}, {"layer", rank_per_layer ? std::to_string(load.layers[l]) : "all"},
               {"expert", std::to_string(e)}, {"rank", std::to_string(r)}}));
        }
      }
    }
    last_rank_expert_.assign(by_rank.size(), 0);
  }
  for (size_t i = 0; i < by_rank.size(); ++i) {
    if (by_rank[i] > last_rank_expert_[i]) {
      rank_series_[i]->Increment(static_cast<double>(by_rank[i] - last_rank_expert_[i]));
    }
  }
  last_rank_expert_ = std::move(by_rank);
  if (load.rebalances > last_rebalances_) {
    eplb_rebalances_->Increment(static_cast<double>(load.rebalances - last_rebalances_));
    last_rebalances_ = load.rebalances;
  }
}

void ServingMetrics::ObserveKvPull(int64_t bytes, double seconds) {
  kv_pull_seconds_->Observe(seconds);
  kv_pull_bytes_->Observe(static_cast<double>(bytes));
  kv_bytes_total_->Increment(static_cast<double>(bytes));
}

void ServingMetrics::ObserveStepTime(double seconds, double predicted_seconds) {
  step_seconds_->Observe(seconds);
  if (predicted_seconds >= 0 && seconds > 0) step_prediction_error_->Observe((predicted_seconds - seconds) / seconds);
}

void ServingMetrics::UpdateKvTiers(const std::vector<KvTierStats>& tiers, const KvTierTotals& totals) {
  auto advance = [](prometheus::Counter& counter, int64_t now, int64_t before) {
    if (now > before) counter.Increment(static_cast<double>(now - before));
  };
  std::lock_guard lock(mu_);
  for (const KvTierStats& t : tiers) {
    const KvTierStats& was = last_tier_[t.name];
    const prometheus::Labels l = {{"model_name", model_name_}, {"tier", t.name}};
    advance(tier_hits_->Add(l), t.store.hits, was.store.hits);
    advance(tier_misses_->Add(l), t.store.misses, was.store.misses);
    advance(tier_hit_bytes_->Add(l), t.store.hit_bytes, was.store.hit_bytes);
    advance(tier_stored_->Add(l), t.store.puts, was.store.puts);
    advance(tier_stored_bytes_->Add(l), t.store.put_bytes, was.store.put_bytes);
    advance(tier_evictions_->Add(l), t.store.evictions, was.store.evictions);
    advance(tier_rejected_->Add(l), t.store.rejected, was.store.rejected);
    auto error = [&](const char* kind, int64_t now, int64_t before) {
      advance(tier_errors_->Add({{"model_name", model_name_}, {"tier", t.name}, {"kind", kind}}), now, before);
    };
    error("unavailable", t.store.errors, was.store.errors);
    error("corrupt", t.store.corrupt, was.store.corrupt);
    error("bad_size", t.bad_size, was.bad_size);
    error("spill_failed", t.spill_errors, was.spill_errors);
    error("spill_skipped", t.spills_skipped, was.spills_skipped);
    tier_usage_->Add(l).Set(static_cast<double>(t.store.bytes_stored));
    retained_blocks_->Add(l).Set(static_cast<double>(t.store.pinned_blocks));
    last_tier_[t.name] = t;
  }
  advance(*tier_loaded_tokens_, totals.tokens_loaded, last_tier_totals_.tokens_loaded);
  advance(*tier_fetches_, totals.fetches, last_tier_totals_.fetches);
  advance(*tier_fetches_refused_, totals.fetches_refused, last_tier_totals_.fetches_refused);
  last_tier_totals_ = totals;
}

void ServingMetrics::ObserveKvTierOp(const std::string& tier, KvTierOp op, double seconds) {
  static const Histogram::BucketBoundaries kBuckets = {0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005,
                                                       0.01,    0.02,   0.05,   0.1,    0.2,   0.5,   1.0};
  tier_seconds_
      ->Add({{"model_name", model_name_}, {"tier", tier}, {"op", op == KvTierOp::kLoad ? "load" : "spill"}}, kBuckets)
      .Observe(seconds);
}

std::string ServingMetrics::Serialize() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace tessera
