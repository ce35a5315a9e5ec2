#include "server/serving/ttft_slo.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "server/serving/metrics.h"

namespace tessera {

namespace {

int64_t NowSecond() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string Fixed3(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

}  // namespace

TtftSlo::TtftSlo(TtftSloOptions options, int64_t max_num_batched_tokens, ServingMetrics* metrics)
    : slo_s_(options.slo_ms / 1e3),
      slo_ms_(options.slo_ms),
      model_(std::move(options.model)),
      max_num_batched_tokens_(std::max<int64_t>(max_num_batched_tokens, 1)),
      metrics_(metrics) {}

StatusOr<TtftSloShare> TtftSlo::Admit(int64_t prompt_tokens, bool engine_idle) {
  TtftSloShare share;
  share.tokens = std::max<int64_t>(prompt_tokens, 1);
  share.attention = sim::PrefillAttention(0, share.tokens);
  // Taking the share first orders concurrent arrivals: each sees exactly the
  // shares taken before its own (the two counters may interleave, off by one
  // request's attention at worst).
  sim::PrefillQueue ahead;
  ahead.prefill_tokens = queued_tokens_.fetch_add(share.tokens);
  ahead.prefill_attention = queued_attention_.fetch_add(share.attention);
  if (!engine_idle) {
    ahead.num_decodes = num_decodes_.load(std::memory_order_relaxed);
    ahead.decode_context = decode_context_.load(std::memory_order_relaxed);
  }
  const sim::TtftPrediction p = sim::PredictTtft(*model_, ahead, share.tokens, 0, max_num_batched_tokens_);
  const bool met = p.ttft_s <= slo_s_;
  Record(met);
  if (metrics_ != nullptr) metrics_->ObserveTtftPrediction(p.ttft_s, !met);
  if (met) return share;
  Leave(share);
  const int64_t retry_after = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(p.drain_s)));
  return ResourceExhausted("predicted time to first token " + Fixed3(p.ttft_s) +
                           " s exceeds the server's time-to-first-token SLO of " + Fixed3(slo_s_) +
                           " s (--ttft-slo-ms " + Fixed3(slo_ms_) + "): " + std::to_string(ahead.prefill_tokens) +
                           " prompt tokens are queued ahead and " + std::to_string(ahead.num_decodes) +
                           " sequences decoding; retry after " + std::to_string(retry_after) + " s");
}

void TtftSlo::Leave(const TtftSloShare& share) {
  queued_tokens_.fetch_sub(share.tokens);
  queued_attention_.fetch_sub(share.attention);
}

void TtftSlo::OnStep(const sim::StepShape& shape) {
  num_decodes_.store(shape.num_decode_seqs, std::memory_order_relaxed);
  decode_context_.store(shape.decode_context, std::memory_order_relaxed);
}

void TtftSlo::Record(bool met) {
  const int64_t now = NowSecond();
  {
    std::lock_guard lock(mu_);
    Bucket& b = window_[static_cast<size_t>(now % kWindowSeconds)];
    if (b.second != now) b = Bucket{now, 0, 0};
    ++b.total;
    if (met) ++b.met;
  }
  if (metrics_ != nullptr) metrics_->SetPredictedSloAttainment(Attainment());
}

double TtftSlo::Attainment() const {
  const int64_t now = NowSecond();
  int64_t total = 0;
  int64_t met = 0;
  std::lock_guard lock(mu_);
  for (const Bucket& b : window_) {
    if (b.second < 0 || now - b.second >= kWindowSeconds) continue;
    total += b.total;
    met += b.met;
  }
  return total == 0 ? 1.0 : static_cast<double>(met) / static_cast<double>(total);
}

}  // namespace tessera
