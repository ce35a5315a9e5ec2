// The settings of `tessera serve` (flags, or keys of its --config TOML file)
// and the checks run on them before anything binds or loads. `tessera serve
// --check-config` runs the same checks and exits, so a deployment's arguments
// and config file can be validated without starting a server (the Kubernetes
// manifests' tests do this for every flag they pass).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "runtime/spec/spec_config.h"
#include "server/router/router.h"

namespace tessera {

struct ServeFlags {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8000;
  int grpc_port = 50051;
  std::string port_file;
  std::vector<std::string> api_keys;
  // The deployment credential (docs/architecture.md, "Threat model"): the
  // flag's path, and the key the command reads from it before validation
  // ("" : no file given).
  std::string internal_api_key_file;
  std::string internal_api_key;
  int threads = 0;
  int64_t num_kv_blocks = 0;
  int64_t kv_cache_mb = 1024;
  bool kv_cache_mb_set = false;
  std::string device = "cpu";
  double gpu_memory_utilization = 0.9;
  bool enforce_eager = false;
  bool deterministic = false;
  int64_t max_model_len = 0;
  int32_t max_num_seqs = 64;
  int64_t max_num_batched_tokens = 2048;
  double max_step_ms = 250;
  std::string cost_model;  // --cost-model: the twin's step-time model (JSON, runtime/sim/cost_model.h)
  double ttft_slo_ms = 0;  // --ttft-slo-ms: SLO-aware admission (server/serving/ttft_slo.h); 0: off
  int64_t max_pending_requests = 1024;
  int32_t max_logprobs = 20;
  int64_t max_prompt_logprobs_entries = 65536;
  int64_t request_timeout_s = 600;
  int64_t drain_timeout_s = 30;
  uint64_t max_body_bytes = 8u << 20;
  int64_t idle_timeout_s = 60;
  std::string served_model_name;
  std::string default_model_size = "0.5b";
  std::string speculative_config;  // JSON, vLLM's fields
  // Disaggregation (docs/architecture.md, "Disaggregation").
  std::string role = "unified";  // unified | prefill | decode | router
  int kv_transfer_port = 0;      // prefill/decode: KV transfer control plane (gRPC); 0: any
  std::string kv_ucx_tls;        // UCX transports for KV bytes
  double kv_pin_timeout_s = 60;
  double kv_pull_timeout_s = 5;
  std::string kv_transfer_fault;  // hidden: fault injection for tests
  bool kv_peer_fetch = false;     // unified: KV transfer agent for peer fetch
  RouterFlags router;
  std::string kv_events_config;    // JSON, vLLM's KVEventsConfig fields
  // KV tiers below the device pool (runtime/kv_connectors/tier_connector.h); each on when set.
  double kv_offload_host_gb = 0;      // host DRAM LRU tier
  std::string kv_offload_disk_dir;    // local disk tier (kept across restarts)
  double kv_offload_disk_gb = 0;      // its bound; 0: 10 GB
  std::string kv_offload_remote_url;  // redis://HOST:PORT[/DB]: shared Redis/Valkey tier
  // Tamper-proof shared KV and tenant isolation (AddKvSecurityFlags; docs/architecture.md,
  // "Tamper-proof shared KV" and "Tenant isolation").
  std::string prefix_caching_hash_algo = "sha256";  // vLLM's names: sha256 | sha256_cbor
  std::string kv_offload_secret_file;               // HMAC key of disk/Redis tier records
  std::string cache_isolation = "none";             // none | api-key | salt
  std::string receipt_key;                          // Ed25519 key file that signs receipts ("" : unsigned)
  std::string tool_call_parser;    // "" : from the chat template
  std::string reasoning_parser;    // "" : none
  bool enable_auto_tool_choice = false;  // vLLM's flag; "auto" works without it here
  bool chat_template_content_special_tokens = false;  // special-token text in chat content: control tokens
  std::string cache_control = "retain";  // Anthropic cache_control: retain | refuse | best-effort (= retain)
  // Retention budgets (docs/architecture.md, "Retention"); -1: the default
  // (max: half the device pool's tokens; per key: as max).
  int64_t retention_max_tokens = -1;
  int64_t retention_per_key_tokens = -1;
  double retention_ttl_scale = 1.0;  // testing only: multiplies every retention TTL
  int64_t responses_store_mb = 256;       // /v1/responses' in-memory store cap (0: store nothing)
  std::string record;                     // --record DIR: the request log replay reads ("" : off)
  double record_max_mb = 256;             // its bound, all files together
  std::string responses_store_url;        // redis://HOST:PORT[/DB]: finished responses shared in Redis
  int64_t responses_store_ttl_s = 0;      // a record's lifetime there (0: 30 days)
  // Parallel ranks (engine/parallel/shard/rank_group.h), vLLM's names.
  int tensor_parallel_size = 1;
  int data_parallel_size = 1;
  bool enable_expert_parallel = false;
  int64_t num_redundant_experts = -1;  // -1: not given
  bool enable_eplb = false;
  std::string eplb_config;             // JSON, vLLM's EPLBConfig fields
  int nnodes = 0;              // 0: $LWS_GROUP_SIZE or 1
  int node_rank = -1;          // -1: $LWS_WORKER_INDEX or 0
  std::string leader_addr;     // host[:port]; empty: $LWS_LEADER_ADDRESS or 127.0.0.1
  double parallel_timeout_s = 60;
};

// Registers every setting on `cmd` (defined in cmd_serve.cc, beside the
// subcommand's own actions --config and --check-config). `f` must outlive
// the parse; kv_cache_mb_set records whether --kv-cache-mb was given.
void AddServeFlags(CLI::App* cmd, ServeFlags* f);

// Applies the --config TOML file `path` (CLI11's reader; keys are long option
// names) to the options of `cmd` that were not given on the command line
// (defined in cmd_serve.cc; `tessera simulate` reads serve's files too).
// Unknown keys are errors naming the key, so typos do not pass silently.
Status ApplyServeConfigFile(CLI::App* cmd, const std::string& path);

// --prefix-caching-hash-algo, --kv-offload-secret-file, --cache-isolation
// (serve_flags.cc; AddServeFlags calls it).
void AddKvSecurityFlags(CLI::App* cmd, ServeFlags* f);

// The deployment secret in `path` (trailing whitespace trimmed): NOT_FOUND /
// INVALID_ARGUMENT naming --kv-offload-secret-file when unreadable, empty or
// shorter than 16 bytes.
StatusOr<std::string> ReadKvOffloadSecret(const std::string& path);

// Checks that need no files, network or devices: values and combinations of
// flags (single values are already range-checked by the CLI parser). On
// success returns the parsed --speculative-config (nullopt when not given).
// Errors name the flag.
StatusOr<std::optional<SpeculativeConfig>> ValidateServeFlags(const ServeFlags& f);

// What `--check-config` (full scope) verifies beyond ValidateServeFlags, cheaply:
// that --host resolves, --port-file's directory exists, --device cuda is built
// in, and --model (and a draft model) exists and its metadata (config.json or
// the GGUF header) parses. Nothing is loaded or bound. Returns one line per
// fact checked, for the report.
StatusOr<std::vector<std::string>> CheckServeEnvironment(const ServeFlags& f,
                                                         const std::optional<SpeculativeConfig>& speculative);

}  // namespace tessera
