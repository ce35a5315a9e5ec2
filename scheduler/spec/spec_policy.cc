#include "scheduler/spec/spec_policy.h"

#include <algorithm>

namespace tessera {

int32_t SpeculativeTokensForBatch(const SpeculativeConfig& c, int64_t num_decoding) {
  num_decoding = std::max<int64_t>(1, num_decoding);
  if (c.disable_by_batch_size > 0 && num_decoding > c.disable_by_batch_size) return 0;
  const int64_t k = std::min<int64_t>(c.num_speculative_tokens, c.max_verify_tokens / num_decoding - 1);
  return static_cast<int32_t>(std::max<int64_t>(0, k));
}

}  // namespace tessera
