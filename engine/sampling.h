// Sampler: one host logits row -> one token (+ log-probabilities). Arithmetic
// only; knows nothing of requests or the scheduler — the caller passes the
// knobs (SamplerConfig) and the sequence's history (SampleContext).
//
// Processing order (vLLM V1): allowed-token mask (structured output) ->
// banned tokens (min_tokens) -> logit_bias ->
// repetition / frequency / presence penalties -> greedy argmax when
// temperature < 1e-5 (lowest index on ties) -> temperature -> min_p -> top_k
// -> top_p -> draw.
//
// Randomness is counter-based: the draw for (seed, choice index, output
// position) is splitmix64 of those three, so a sequence gets the same tokens
// whatever batch it runs in, however often it is preempted and recomputed.
//
// Log-probabilities are the log-softmax of the RAW logits (before bias,
// penalties, temperature and truncation), as vLLM returns by default.
//
// Thread-safety: a Sampler holds scratch buffers; use one per thread.
// Cost: O(V) per row, plus O(V log V) when top_p < 1 (sort), O(V log k) for top_k.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace tessera {

struct SamplerConfig {
  float temperature = 1.0f;  // < 1e-5: greedy
  int32_t top_k = -1;        // <= 0: disabled
  float top_p = 1.0f;        // (0, 1]; 1: disabled
  float min_p = 0.0f;        // [0, 1]; 0: disabled
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;  // 1: disabled
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> additive bias
  uint64_t seed = 0;
  bool logprobs = false;     // compute the sampled token's logprob
  int32_t top_logprobs = 0;  // plus this many most likely alternatives
};

// The sequence being sampled. Spans must stay valid during Sample().
struct SampleContext {
  std::span<const int32_t> prompt_tokens;  // repetition penalty
  std::span<const int32_t> output_tokens;  // all penalties
  std::span<const int32_t> banned_tokens;  // masked to -inf (EOS before min_tokens)
  // Structured output: bit t of allowed_tokens[t / 32] set <=> token t may be
  // sampled; empty: every token may. If nothing allowed survives the other
  // processing, the allowed token with the highest raw logit is taken.
  std::span<const uint32_t> allowed_tokens;
  int32_t choice_index = 0;                // RNG stream
  int64_t output_position = 0;             // RNG counter: output_tokens.size() normally
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  bool operator==(const TokenLogprob&) const = default;
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;           // raw log-softmax; set when config.logprobs
  std::vector<TokenLogprob> top;  // config.top_logprobs entries, most likely first
};

// Uniform double in [0, 1) for (seed, stream, counter); pure function.
double CounterUniform(uint64_t seed, uint64_t stream, uint64_t counter);

// Raw log-softmax helpers (double accumulation, fixed order).
double LogSumExp(std::span<const float> logits);
// The k highest logits as log-probs, ties broken by lower token id.
std::vector<TokenLogprob> TopLogprobs(std::span<const float> logits, int32_t k, double lse);

class Sampler {
 public:
  // `logits` is one row of vocab_size f32 (not modified).
  SampleResult Sample(std::span<const float> logits, const SamplerConfig& config,
                      const SampleContext& context);

  // The processed distribution Sample() draws from (probabilities over the
  // vocabulary, zero outside the kept set); for tests and diagnostics.
  std::vector<double> Distribution(std::span<const float> logits, const SamplerConfig& config,
                                   const SampleContext& context);

 private:
  // Applies bias/penalties/temperature/truncation into work_; fills cand_
  // (kept token ids) and probs_ (their normalised probabilities). Returns the
  // greedy token instead (>= 0) when the config is greedy, else -1.
  int32_t Process(std::span<const float> logits, const SamplerConfig& config, const SampleContext& context);

  std::vector<float> work_;
  std::vector<int32_t> cand_;
  std::vector<double> probs_;
  std::vector<int32_t> counts_;
};

}  // namespace tessera
