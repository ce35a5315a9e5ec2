// The serving side of receipts (docs/architecture.md, "Receipts"): what a
// ServingEngine digests once at start (ReceiptContext), and a recorder that
// turns one response's generations into a receipt/ Receipt. The protocols
// (server/http, server/grpc) decide where the receipt travels.
//
// MakeReceiptContext: see ServingEngine::Create, which computes it (the
// weights digest reads the whole checkpoint once, then comes from its cache).
//
// Thread-safety: a ReceiptContext is immutable after MakeReceiptContext; a
// ReceiptRecorder belongs to one response and is used by one thread at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "receipt/receipt.h"
#include "receipt/signing.h"
#include "server/serving/input_processor.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace tessera {

struct GenerationUpdate;
struct LogprobEntry;

struct ReceiptContext {
  receipt::ServerDigests digests;
  nlohmann::json flags;  // what `digests.flags` digests, for logs and messages
  std::optional<receipt::ReceiptSigner> signer;  // --receipt-key
};

// The model's tokenizer digest: the tokenizer and chat-template files of an HF
// directory (those present of tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, chat_template.jinja, chat_template.json,
// generation_config.json), every token's text and special flag by id, and the
// chat template sources as loaded (a GGUF file's tokenizer lives in its
// metadata: the per-id walk covers it).
std::string TokenizerDigest(const std::string& model_dir, const text::Tokenizer& tokenizer,
                            const text::ChatTemplate* chat_template);

// Appends one choice's new tokens' logprobs in the canonical form the
// receipt digests: per token [id, logprob, [[id, logprob], ...]].
void AppendCanonicalLogprobs(const std::vector<int32_t>& token_ids, const std::vector<LogprobEntry>& logprobs,
                             nlohmann::json* out);

class ReceiptRecorder {
 public:
  // Before submitting generation `prompt_index` (`input` as submitted).
  void Begin(size_t prompt_index, const GenerateInput& input);
  // After Submit: the seed the engine used.
  void SetSeed(size_t prompt_index, uint64_t seed, bool drawn);
  void Add(size_t prompt_index, const GenerationUpdate& update);
  // The receipt of everything recorded, signed when the context has a key.
  receipt::Receipt Finish(const ReceiptContext& context) const;
  // The requests as executed (receipt::CanonicalRequest, seeds set), by prompt.
  nlohmann::json CanonicalRequests() const;

 private:
  struct Gen {
    nlohmann::json request;  // CanonicalRequest, its seed set by SetSeed
    bool seed_drawn = false;
    uint64_t seed = 0;
    std::vector<std::vector<int32_t>> tokens;  // per choice
    std::vector<nlohmann::json> logprobs;      // per choice; null when none were returned
  };
  std::vector<Gen> gens_;
};

}  // namespace tessera
