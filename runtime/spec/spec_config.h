// SpeculativeConfig: `--speculative-config` JSON with vLLM's field names
// (method, num_speculative_tokens, prompt_lookup_min/max, model,
// disable_by_batch_size) plus Tessera's max_verify_tokens and
// min_draft_acceptance, parsed and
// validated at startup. Every error names the field. Unknown fields and vLLM
// fields Tessera does not implement are refused, never silently ignored.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace tessera {

enum class SpecMethod { kNgram, kDraftModel };

struct SpeculativeConfig {
  SpecMethod method = SpecMethod::kNgram;
  int32_t num_speculative_tokens = 0;  // k, 1..kMaxSpeculativeTokens
  // n-gram: match the last n tokens, longest n first, n in [min, max].
  int32_t prompt_lookup_min = 5;
  int32_t prompt_lookup_max = 5;
  std::string model;  // draft model: HF directory or .gguf, same vocabulary as the target
  // vLLM's: no speculation in a step where more than this many sequences
  // decode (0: no cutoff).
  int32_t disable_by_batch_size = 0;
  // The k policy (speculation pays only while decode is bandwidth-bound): a
  // step's verification rows stay within this many, so with b decoding
  // sequences each speculates min(k, max_verify_tokens / b - 1) tokens.
  int32_t max_verify_tokens = 64;
  // Tessera's per-sequence k policy: a sequence drafts its k-th token only
  // while the measured chance that it is accepted (alpha^k, alpha the
  // sequence's per-token acceptance rate) is at least this. Below it for k = 1
  // the sequence stops speculating and probes with one draft every
  // kAcceptanceProbeSteps steps. 0 keeps k fixed. On the 2-core CPU one more
  // verified row costs ~0.2 of a plain step (bench/RESULTS.md), hence 0.25.
  double min_draft_acceptance = 0.25;
};

inline constexpr int32_t kMaxSpeculativeTokens = 16;

const char* SpecMethodName(SpecMethod m);

// Parses and validates; INVALID_ARGUMENT naming the offending field, e.g.
// "--speculative-config: num_speculative_tokens must be in 1..16 (got 0)".
StatusOr<SpeculativeConfig> ParseSpeculativeConfig(const std::string& json_text);

}  // namespace tessera
