// Shared by the parallel model tests (threads in shard_test, Gloo processes
// in gloo_test): a few steps of a small batch.
#pragma once

#include <random>
#include <vector>

#include "engine/batch_builder.h"
#include "tests/unit/engine/test_model_util.h"

namespace tessera::parallel::steps {

inline constexpr int64_t kBlocks = 64, kBlockSize = 16;

// Three prompts prefilled together, then two decode steps of all three; logits
// at every prompt token of sequence 0 and the last token of the others.
inline std::vector<ForwardBatch> BatchedSteps(int vocab, bool only_first) {
  std::mt19937 rng(7);
  BatchBuilder bb(kBlocks, kBlockSize);
  const int nseq = only_first ? 1 : 3;
  std::vector<int> seqs;
  for (int i = 0; i < nseq; ++i) seqs.push_back(bb.AddSequence());
  std::vector<ForwardBatch> steps;
  std::vector<BatchBuilder::Chunk> chunks;
  const std::vector<int> lens = {19, 7, 4};
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 3; ++i) prompts.push_back(tessera::testing::RandomTokens(rng, lens[i], vocab));
  for (int i = 0; i < nseq; ++i) {
    BatchBuilder::Chunk c{seqs[i], prompts[i], {}};
    if (i == 0) {
      for (int p = 0; p < lens[0]; ++p) c.logits_at.push_back(p);
    } else {
      c.logits_at.push_back(lens[i] - 1);
    }
    chunks.push_back(c);
  }
  steps.push_back(*bb.Build(chunks));
  for (int step = 0; step < 2; ++step) {
    chunks.clear();
    for (int i = 0; i < nseq; ++i) {
      chunks.push_back({seqs[i], {static_cast<int32_t>((101 * step + 13 * i) % vocab)}, {0}});
    }
    steps.push_back(*bb.Build(chunks));
  }
  return steps;
}

}  // namespace tessera::parallel::steps
