// Receipts (docs/architecture.md, "Receipts"): a versioned, canonical JSON
// record that names everything one response's tokens are a function of, so
// anyone holding the receipt and the request can have them re-executed and
// compared. Protocol-free: server/ fills it from a finished generation and
// decides where it travels (HTTP header, body, gRPC trailer).
//
// Canonical JSON: objects with keys in ascending byte order, no whitespace,
// integers in decimal, floats in the shortest form that round-trips (the
// float parameters are the engine's f32 values widened to double), strings
// UTF-8 with JSON's minimal escapes. The same record always serializes to
// the same bytes, so its SHA-256 and its signature are stable.
//
// Thread-safe: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/sha256.h"
#include "common/status.h"
#include "scheduler/request.h"

namespace tessera::receipt {

inline constexpr int kReceiptVersion = 1;

// What a server digests once at start (lower-case hex SHA-256 each).
struct ServerDigests {
  std::string weights;    // engine/weights_digest.h
  std::string tokenizer;  // tokenizer files + chat template
  std::string engine;     // version, git commit, compiler, ISA flags (EngineBuildInfo)
  std::string flags;      // the numerics-relevant serve flags (FlagsDigest)
  bool operator==(const ServerDigests&) const = default;
};

// One choice's output. The token ids travel in the full form (a response
// body, a stream's final chunk) and are left out of the compact form (the
// `tessera-receipt` header and gRPC trailer, whose size must not grow with
// the output: proxies and clients cap headers at 8-16 KB); the digest binds
// them in both, and the signature covers the digest, not the ids, so either
// form verifies.
struct ChoiceRecord {
  int32_t index = 0;
  bool has_token_ids = true;  // false: the compact form
  std::vector<int32_t> token_ids;
  std::string output;    // hex SHA-256 of the canonical token id array
  std::string logprobs;  // hex SHA-256 of the canonical logprobs, "" when none were returned
};

struct Signature {
  std::string public_key;  // base64url (no padding) of the 32-byte Ed25519 public key
  std::string value;       // base64url of the 64-byte detached signature over SignedBytes()
};

// One prompt's generation (a completions request with a list of prompts has several).
struct GenerationRecord {
  std::string request;  // hex SHA-256 of CanonicalDump(CanonicalRequest(...))
  uint64_t seed = 0;    // the seed used (drawn by the engine when the request gave none)
  bool seed_drawn = false;
  std::vector<ChoiceRecord> choices;  // by choice index
};

struct Receipt {
  int version = kReceiptVersion;
  ServerDigests server;
  std::vector<GenerationRecord> generations;  // by prompt
  std::optional<Signature> signature;
};

// The request as executed: prompt token ids (after the chat template and
// tokenization), every sampling parameter after defaults, the seed used,
// max_tokens, stop strings and ids, and the text options that change what
// the client sees. A structured-output constraint is named by its field only
// (its grammar is not part of the record).
nlohmann::json CanonicalRequest(const Request& request, uint64_t seed_used, bool skip_special_tokens,
                                bool include_stop_str_in_output);

// Canonical serialization (see above).
std::string CanonicalDump(const nlohmann::json& j);
std::string DigestHex(std::string_view bytes);  // lower-case hex SHA-256

// Output digests of one choice.
std::string TokenIdsDigest(const std::vector<int32_t>& token_ids);
// `logprobs`: per token, the token's logprob and its top alternatives as
// [token id, logprob] pairs; already canonical JSON (arrays of numbers).
std::string LogprobsDigest(const nlohmann::json& logprobs);

// The digests of `c` filled from its token ids (and `logprobs` when not null).
ChoiceRecord MakeChoice(int32_t index, std::vector<int32_t> token_ids, const nlohmann::json* logprobs);

nlohmann::json ToJson(const Receipt& r);
// Checks the version, every field's type and that no unknown field is present;
// INVALID_ARGUMENT naming the field. The digests are not checked against the
// token ids here: verification re-executes and compares both.
StatusOr<Receipt> FromJson(const nlohmann::json& j);
// What a signature covers: the canonical JSON of the compact receipt (no
// token ids) without "signature".
std::string SignedBytes(const Receipt& r);

// The same receipt without its token ids (see ChoiceRecord).
Receipt Compact(Receipt r);

// base64url (RFC 4648 section 5, no padding) of the canonical JSON. The
// `tessera-receipt` header and trailer carry Encode(Compact(r)).
std::string Encode(const Receipt& r);
StatusOr<Receipt> Decode(std::string_view base64url);

std::string Base64UrlEncode(std::string_view bytes);
StatusOr<std::string> Base64UrlDecode(std::string_view text);

}  // namespace tessera::receipt
