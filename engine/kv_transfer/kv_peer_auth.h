// Who may take part in a KV transfer (docs/architecture.md, "Threat model"):
// the credentials of the control plane and of vLLM's kv_transfer_params, both
// derived from the deployment's internal key (common/internal_key.h).
//  - Control plane: every OpenTransfer / ReleaseTransfer carries
//    "authorization: Bearer <token>", compared in constant time; anything else
//    is UNAUTHENTICATED. The token is a derived key, not the internal key, so
//    a control plane never learns the credential that opens the HTTP APIs.
//  - kv_transfer_params: the exporting instance signs where its export lives
//    (host, port, handle, engine id, block ids) with an HMAC under another
//    derived key ("remote_signature"); a pulling instance checks it before it
//    connects anywhere, so it only ever connects to peers of its own
//    deployment, whatever a request names.
//  - No internal key (a one-host deployment): no tokens or signatures; the
//    roles bind loopback only (the flags refuse anything else) and a pulling
//    instance connects to loopback peers only.
// Pure values and functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tessera {

struct KvPeerAuth {
  std::string token;        // control-plane Bearer token (hex); "" : no internal key
  std::string signing_key;  // kv_transfer_params HMAC key (raw); "" : no internal key

  // From the internal key ("" : none).
  static KvPeerAuth FromInternalKey(std::string_view internal_key);
  bool enabled() const { return !token.empty(); }
};

// Where an exported prompt's KV lives, as kv_transfer_params names it.
struct KvSourceFields {
  std::string_view host;
  int port = 0;
  std::string_view handle;
  std::string_view engine_id;
  const std::vector<int32_t>* block_ids = nullptr;  // not null
};

// The exporter's "remote_signature" ("" without an internal key).
std::string SignKvSource(const KvPeerAuth& auth, const KvSourceFields& source);

// Before connecting: with an internal key, the signature must match (else
// INVALID_ARGUMENT naming 'kv_transfer_params.remote_signature'); without
// one, the host must be a loopback address (else INVALID_ARGUMENT naming
// 'kv_transfer_params.remote_host').
Status CheckKvSource(const KvPeerAuth& auth, const KvSourceFields& source, std::string_view signature);

// The control plane's check of a call's "authorization" metadata value.
bool KvTokenMatches(const KvPeerAuth& auth, std::string_view authorization);

}  // namespace tessera
