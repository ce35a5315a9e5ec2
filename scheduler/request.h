// Request: what a client asked for, as the engine sees it — token ids (the
// front end has already applied the chat template and tokenized), sampling
// parameters and cache keys. Immutable once submitted; the scheduler keeps
// its per-choice progress in Sequence (sequence.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/sampling_params.h"

namespace tessera {

// Why a sequence ended. kStop: EOS, a stop token, or a stop string (reported
// by the front end); kLength: max_tokens or the context length; kAbort: the
// client went away or the request was cancelled.
enum class FinishReason { kNone, kStop, kLength, kAbort };

// OpenAI's spelling: "stop", "length", "abort" ("" for kNone).
const char* FinishReasonName(FinishReason reason);

// Disaggregation (docs/architecture.md, "Disaggregation"), on a decode instance: the prompt's KV was
// computed by a prefill instance, which holds it pinned under `handle`. Before
// this request's prefill the scheduler pulls the full blocks it does not find
// in its own prefix cache (vLLM's kv_transfer_params: remote_host,
// remote_port, remote_request_id, remote_block_ids, remote_engine_id).
struct RemoteKvSource {
  std::string host;
  int32_t port = 0;
  std::string handle;
  std::string engine_id;
  std::vector<int32_t> block_ids;  // the prefill's blocks of the prompt's full blocks, in order
  // The exporter's HMAC over the fields above (kv_transfer_params'
  // remote_signature; engine/kv_transfer/kv_peer_auth.h), checked before any
  // connection; "" when the deployment has no internal key.
  std::string signature;
};

// Prefill side, the mirror image of RemoteKvSource: where a decode instance
// finds an exported request's prompt KV, vLLM's kv_transfer_params of a
// prefill response (remote_engine_id, remote_host, remote_port,
// remote_request_id, remote_block_ids).
struct KvExportInfo {
  std::string engine_id;
  std::string host;
  int32_t port = 0;
  std::string handle;
  std::vector<int32_t> block_ids;
  std::string signature;  // see RemoteKvSource::signature
};

// Retention (docs/architecture.md, "Retention"): leading prompt prefixes the
// client asked to keep cached for a time (Anthropic's cache_control, OpenAI's
// prompt_cache_retention), as plain data: the scheduler never sees the field.
struct RetainedPrefix {
  int64_t num_tokens = 0;  // leading prompt tokens; only the full blocks among them are held
  int64_t ttl_ns = 0;      // > 0; the hold lasts ttl_ns from the request's admission, refreshed by each marked reuse
  bool operator==(const RetainedPrefix&) const = default;
};
struct Retention {
  std::vector<RetainedPrefix> prefixes;  // empty: nothing retained
  std::string tenant;  // whose budget it counts against: a digest of the API key ("" : the keyless tenant)
  std::string field;   // the request field that asked, quoted in budget errors (400/429 name it)
};

struct Request {
  std::string id;  // unique among live requests; chosen by the front end
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
  // Mixed into every prefix-cache block hash, so requests only share KV when
  // these match: LoRA adapter id, a per-tenant cache salt, multimodal ids.
  std::vector<uint64_t> cache_keys;
  // vLLM's cache_salt (a tenant's secret): an extra key of the first block's
  // hash only (block_hash.h), so the chain carries it; "" : unsalted. Under
  // --cache-isolation api-key the server rewrites it into the key's namespace.
  std::string cache_salt;
  // Monotonic nanoseconds when the front end received it (queue-time metric);
  // 0: the scheduler stamps it at AddRequest.
  int64_t arrival_time_ns = 0;
  // Decode side: where the prompt's KV can be pulled from (see RemoteKvSource).
  std::optional<RemoteKvSource> remote_kv;
  // Prefill side (vLLM's do_remote_decode): when the request ends (not
  // aborted), its prompt's full blocks stay pinned under its id until a decode
  // instance pulls them or the pin times out. Needs n == 1.
  bool export_kv = false;
  // Prefixes to hold past their use (see Retention); checked against the
  // retention budgets at AddRequest.
  Retention retention;
};

// What the client asked, checked once, in the front end (docs/architecture.md,
// "Validation"; server/serving/input_processor.h, and the offline paths that
// build Requests themselves): prompt token ids (non-empty, inside the
// vocabulary), parameters, one choice for an exported prompt, context length.
// INVALID_ARGUMENT naming the field, or OUT_OF_RANGE for context length. The
// id is the front end's to name, and the engine loop's to check.
Status ValidateRequest(const Request& request, const ModelLimits& limits);

// What the scheduler relies on and ValidateRequest (plus the loop's id check)
// established: a non-empty id and prompt, at least one choice (exactly one
// when exported), prompt + max_tokens within the context. O(1): token ids and
// parameter ranges are trusted, not re-checked. INTERNAL naming the broken
// invariant (a caller skipped the validation).
Status CheckRequestInvariants(const Request& request, const ModelLimits& limits);

}  // namespace tessera
