#include "runtime/sim/ttft_predictor.h"

#include <algorithm>

namespace tessera::sim {

namespace {

// Nanoseconds of the steps that compute `tokens` prefill tokens attending
// `attention` positions behind `queue`'s decodes; *steps gets their count.
int64_t PrefillNs(const LinearCostModel& model, const PrefillQueue& queue, int64_t tokens, int64_t attention,
                  int64_t max_num_batched_tokens, int64_t* steps) {
  *steps = 0;
  if (tokens <= 0) return 0;
  const int64_t r = std::max<int64_t>(queue.num_decodes, 0);
  // The scheduler always leaves a prefill at least one token of a step.
  const int64_t per_step = std::max<int64_t>(max_num_batched_tokens - r, 1);
  const int64_t k = (tokens + per_step - 1) / per_step;
  *steps = k;
  StepShape sum;
  sum.num_prefill_seqs = 1;
  sum.prefill_tokens = tokens;
  sum.prefill_attention = attention;
  sum.num_decode_seqs = r * k;
  sum.decode_tokens = r * k;
  // Step i (from 0) attends decode_context + r * i positions.
  sum.decode_context = std::max<int64_t>(queue.decode_context, 0) * k + r * (k * (k - 1) / 2);
  const double base_ns = model.coefficients().base_ms * 1e6;
  return model.StepNs(sum) + static_cast<int64_t>(base_ns * static_cast<double>(k - 1));
}

}  // namespace

int64_t PrefillAttention(int64_t start, int64_t end) {
  if (end <= start) return 0;
  const int64_t n = end - start;
  return n * start + n * (n + 1) / 2;
}

TtftPrediction PredictTtft(const LinearCostModel& model, const PrefillQueue& ahead, int64_t prompt_tokens,
                           int64_t cached_tokens, int64_t max_num_batched_tokens) {
  const int64_t cached = std::clamp<int64_t>(cached_tokens, 0, std::max<int64_t>(prompt_tokens - 1, 0));
  const int64_t own_tokens = std::max<int64_t>(prompt_tokens - cached, 1);  // the last token is always computed
  const int64_t own_attention = PrefillAttention(prompt_tokens - own_tokens, prompt_tokens);
  TtftPrediction p;
  int64_t drain_steps = 0;
  p.drain_s = static_cast<double>(PrefillNs(model, ahead, ahead.prefill_tokens, ahead.prefill_attention,
                                            max_num_batched_tokens, &drain_steps)) / 1e9;
  p.ttft_s = static_cast<double>(PrefillNs(model, ahead, ahead.prefill_tokens + own_tokens,
                                           ahead.prefill_attention + own_attention, max_num_batched_tokens,
                                           &p.steps)) / 1e9;
  return p;
}

}  // namespace tessera::sim
