// Comparing a receipt with the receipt of its re-execution (docs/architecture.md,
// "Receipts"): equal, or the first place they differ. Pure; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "receipt/receipt.h"

namespace tessera::receipt {

struct Comparison {
  bool equal = true;
  // When not equal: what differs ("token", "length", "output_digest",
  // "logprobs", "generations", "choices"), where, and in words.
  std::string what;
  int32_t generation = -1;
  int32_t choice = -1;
  int64_t token_index = -1;              // first differing output position ("token", "length")
  std::optional<int32_t> receipt_token;  // the receipt's token there (none: its output ended)
  std::optional<int32_t> replay_token;   // the re-execution's
  std::string message;
};

// `claimed`: the receipt presented; `replayed`: the one its request's
// re-execution produced. Compares outputs only (the caller checks the model,
// request digests and signature first).
Comparison CompareOutputs(const Receipt& claimed, const Receipt& replayed);

nlohmann::json ToJson(const Comparison& c);

}  // namespace tessera::receipt
