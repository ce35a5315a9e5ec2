// The acceptance rule of speculative decoding: given the target model's
// logits for the 1 + k verification rows of one sequence and its k drafts,
// which drafts are accepted and which token follows (the correction at the
// first rejection, or the bonus token after k acceptances). The output
// tokens are distributed exactly as plain decoding's:
//
//  * Point-mass proposals (n-gram drafts, greedy drafts, and every seeded
//    request): row i draws the token plain decoding would draw there, with the
//    same counter-based uniform; draft i is accepted iff it equals that token.
//    This is rejection sampling with q = δ(draft) (accept with p(d), else draw
//    from p without d), and it makes the tokens bitwise those of speculation
//    off — greedy and seeded outputs do not change.
//  * Draft-model proposals with probabilities q (unseeded sampling): accept d
//    with probability min(1, p(d)/q(d)); on rejection draw from
//    norm(max(0, p - q)) (Leviathan et al. 2023, Chen et al. 2023).
//
// p is the sampler's processed distribution (penalties over the output so far
// including accepted drafts, bias, min_tokens bans, temperature, min_p, top_k,
// top_p). Log-probabilities come from the target's raw logits, as without
// speculation. Arithmetic only; no tensors.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/sampling.h"

namespace tessera {

struct VerifyInput {
  std::span<const float> logits;  // (1 + drafts.size()) rows of `vocab`
  int64_t vocab = 0;
  std::span<const int32_t> drafts;
  std::span<const std::vector<float>> draft_probs;  // one per draft (q), or empty: point mass
  const SamplerConfig* config = nullptr;
  std::span<const int32_t> prompt_tokens;
  std::span<const int32_t> output_tokens;  // before this step
  int64_t min_tokens = 0;
  std::span<const int32_t> banned_tokens;  // while the output is shorter than min_tokens
  int32_t choice_index = 0;
};

struct VerifyResult {
  std::vector<SampleResult> tokens;  // accepted drafts, then the correction/bonus token
  int32_t num_accepted = 0;          // tokens.size() - 1
};

VerifyResult VerifyDrafts(Sampler& sampler, const VerifyInput& in);

// The q-rule on one position, for tests: accept `draft` when u_accept <
// p[draft] / q[draft]; otherwise return the token at u_residual of
// norm(max(0, p - q)). Returns the token; *accepted says which case.
int32_t AcceptOrResample(std::span<const double> p, std::span<const float> q, int32_t draft, double u_accept,
                         double u_residual, bool* accepted);

// Counter-based uniform streams of speculation, apart from the sampler's
// (stream = choice index): draws of draft tokens, acceptance tests, residual
// draws, for (seed, choice, output position).
double DraftUniform(uint64_t seed, int32_t choice, int64_t position);
double AcceptUniform(uint64_t seed, int32_t choice, int64_t position);
double ResidualUniform(uint64_t seed, int32_t choice, int64_t position);

}  // namespace tessera
