// vLLM's `kv_transfer_params` request/response field (its P/D connector
// handshake), read from an instance's requests (HTTP, and gRPC's JSON-text
// field) and written into its prefill responses; the router only passes the
// object along (docs/architecture.md, "Disaggregation"):
//   to a prefill:   {"do_remote_decode": true}
//   its response:   {"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id",
//                    "remote_block_ids", "remote_host", "remote_port", "remote_request_id",
//                    "remote_signature" (Tessera's: an HMAC under the internal key)}
//   to a decode:    that object as it came back
// so an external router that speaks it can drive Tessera's instances.
#pragma once

#include <optional>

#include <nlohmann/json.hpp>

#include "scheduler/request.h"
#include "server/openai/api_error.h"

namespace tessera {

struct KvTransferRequest {
  bool do_remote_decode = false;           // prefill: export the prompt's KV
  std::optional<RemoteKvSource> remote;    // decode: pull it from here
};

// Reads body["kv_transfer_params"] (absent or null: nothing asked). 400 naming
// the field on a wrong type or an incomplete do_remote_prefill object.
std::optional<ApiError> ParseKvTransferParams(const nlohmann::ordered_json& body, KvTransferRequest* out);
// The same for the field's value (null: nothing asked).
std::optional<ApiError> ParseKvTransferValue(const nlohmann::ordered_json& value, KvTransferRequest* out);

// Who sent a request (docs/architecture.md, "Threat model").
struct KvTransferCaller {
  bool internal_key_configured = false;  // --internal-api-key-file was given
  bool internal = false;                 // the request presented that key
};

// With an internal key configured, only a request that presented it may carry
// kv_transfer_params (export or pull); anything else is a 400 naming the
// field, before the request reaches the engine (no connection is made).
std::optional<ApiError> CheckKvTransferCaller(const KvTransferRequest& kv, const KvTransferCaller& caller);

// The prefill response's kv_transfer_params for `info` (with
// "remote_signature" when the deployment has an internal key).
nlohmann::ordered_json KvTransferParamsJson(const KvExportInfo& info);

}  // namespace tessera
