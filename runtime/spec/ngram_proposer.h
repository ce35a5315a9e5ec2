// NgramProposer: prompt lookup decoding. Finds the longest n in
// [prompt_lookup_min, prompt_lookup_max] whose last n tokens of prompt +
// output occurred earlier, and proposes the (up to k) tokens that followed
// the most recent such occurrence (continuing a repeating loop past the end
// of the sequence). No model; O(length x n) per sequence
// worst case, microseconds for thousands of tokens. Stateless.
#pragma once

#include "runtime/spec/proposer.h"

namespace tessera {

// The continuation after the latest earlier match of the longest suffix
// n-gram, n in [min_n, max_n], at most k tokens; empty when nothing matches.
std::vector<int32_t> NgramLookup(std::span<const int32_t> tokens, int32_t min_n, int32_t max_n, int32_t k);

class NgramProposer : public Proposer {
 public:
  NgramProposer(int32_t min_n, int32_t max_n) : min_n_(min_n), max_n_(max_n) {}
  Status Propose(std::span<const DraftInput> inputs, std::vector<Draft>* drafts) override;

 private:
  int32_t min_n_, max_n_;
};

}  // namespace tessera
