#include "runtime/spec/ngram_proposer.h"

#include <algorithm>

namespace tessera {

std::vector<int32_t> NgramLookup(std::span<const int32_t> t, int32_t min_n, int32_t max_n, int32_t k) {
  const int64_t len = static_cast<int64_t>(t.size());
  if (k <= 0 || len < min_n + 1) return {};
  max_n = static_cast<int32_t>(std::min<int64_t>(max_n, len - 1));
  // For each earlier end position e (the match is t[e-n+1..e], continuation
  // from e+1), the length of the common suffix with the whole sequence, up to
  // max_n. Scan from the most recent; keep the first longest.
  int64_t best_len = 0, best_end = -1;
  for (int64_t e = len - 2; e >= 0 && best_len < max_n; --e) {
    int64_t n = 0;
    while (n < max_n && e - n >= 0 && t[e - n] == t[len - 1 - n]) ++n;
    if (n >= min_n && n > best_len) {
      best_len = n;
      best_end = e;
    }
  }
  if (best_end < 0) return {};
  // The text after the match repeats what followed it; past the end of the
  // sequence that is the proposal itself (a loop of period len - from).
  const int64_t from = best_end + 1;
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) out.push_back(from + i < len ? t[from + i] : out[i - (len - from)]);
  return out;
}

Status NgramProposer::Propose(std::span<const DraftInput> inputs, std::vector<Draft>* drafts) {
  drafts->assign(inputs.size(), Draft{});
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].k > 0) (*drafts)[i].token_ids = NgramLookup(inputs[i].token_ids, min_n_, max_n_, inputs[i].k);
  }
  return Status::Ok();
}

}  // namespace tessera
