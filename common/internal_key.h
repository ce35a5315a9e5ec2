// The deployment credential (`--internal-api-key-file`, docs/architecture.md,
// "Threat model"): one secret shared by every role of a deployment. The router
// presents it as a Bearer key to instances; everything else an instance needs
// to authenticate its peers is derived from it here, one key per purpose, so a
// derived key that leaks (e.g. a KV control-plane token sent to a peer) never
// reveals the credential itself or another purpose's key.
//
// All functions are pure and thread-safe. Cost: one HMAC-SHA256 (~1 µs) each.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace tessera {

// The key file's first line, surrounding whitespace trimmed. The key must be
// at least 16 bytes (a guessable key would make every derived key guessable).
// Errors name `flag`.
StatusOr<std::string> ReadInternalKeyFile(const std::string& path, std::string_view flag = "--internal-api-key-file");

// 32 raw bytes: HMAC-SHA256(key, "tessera/" + purpose). Distinct purposes give
// independent keys.
std::string DeriveInternalKey(std::string_view key, std::string_view purpose);

// Lower-case hex HMAC-SHA256 of `message` under `key`.
std::string HmacSha256Hex(std::string_view key, std::string_view message);

// Compares without an early exit on the first differing byte (the lengths
// are not secret).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// Whether `host` names this machine's loopback: "localhost", 127.0.0.0/8 or
// ::1 (bracketed or not). Without an internal key, listeners and peers must be
// loopback (docs/architecture.md, "Threat model").
bool IsLoopbackHost(std::string_view host);

}  // namespace tessera
