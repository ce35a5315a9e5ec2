#include "runtime/spec/spec_policy.h"

#include <algorithm>

namespace tessera {

int32_t SpeculativeTokensForBatch(const SpeculativeConfig& c, int64_t num_decoding) {
  num_decoding = std::max<int64_t>(1, num_decoding);
  if (c.disable_by_batch_size > 0 && num_decoding > c.disable_by_batch_size) return 0;
  const int64_t k = std::min<int64_t>(c.num_speculative_tokens, c.max_verify_tokens / num_decoding - 1);
  return static_cast<int32_t>(std::max<int64_t>(0, k));
}

void AcceptanceEstimate::Record(int32_t num_accepted, int32_t num_drafted) {
  if (num_drafted <= 0) return;
  // Decay 0.8 per verify: about the last five verifies count.
  accepted_ = 0.8 * accepted_ + num_accepted;
  rejected_ = 0.8 * rejected_ + (num_accepted < num_drafted ? 1.0 : 0.0);
}

int32_t AcceptanceEstimate::Tokens(int32_t k_max, double min_draft_acceptance) {
  if (k_max <= 0) return 0;
  if (min_draft_acceptance <= 0) return k_max;
  const double alpha = Rate();
  int32_t k = 0;
  for (double p = alpha; k < k_max && p >= min_draft_acceptance; p *= alpha) ++k;
  if (k > 0) {
    steps_without_drafts_ = 0;
    return k;
  }
  if (++steps_without_drafts_ >= kAcceptanceProbeSteps) {
    steps_without_drafts_ = 0;
    return 1;  // re-measure: the text may have turned repetitive
  }
  return 0;
}

}  // namespace tessera
