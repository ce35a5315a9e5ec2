// `tessera serve --role router`, or the `tessera-router` binary: the
// disaggregated front (docs/architecture.md, "Router"). The same
// OpenAI HTTP API as a unified server (/v1/completions, /v1/chat/completions,
// streaming included), no model loaded. For each request: tokenize on an
// instance; prompts of at least --prefill-threshold tokens go to a prefill
// instance (max_tokens 1, kv_transfer_params.do_remote_decode), whose
// kv_transfer_params are handed to a decode instance that pulls the KV and
// streams through the router; shorter prompts go straight to decode. The same
// over gRPC with --grpc-port (router_grpc.h).
// Faults: a failed prefill is retried on another, then the decode recomputes;
// a decode that dies mid-stream is replaced by another one given prompt +
// tokens so far, so the client's stream continues without loss or repeat.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera {

// The router's settings; their command-line flags are cli/router_flags.h's.
struct RouterFlags {
  std::vector<std::string> prefill_instances;  // host:port (HTTP)
  std::vector<std::string> decode_instances;
  std::string instances_file;  // JSON {"prefill": [...], "decode": [...]}, re-read when it changes
  int64_t prefill_threshold = 128;  // prompt tokens; shorter prompts skip the prefill pool
  double poll_interval_s = 0.5;     // load and health polling of each instance
  double dns_interval_s = 5;        // re-resolution of instance names (headless Services)
  int max_migrations = 3;           // decode replacements per choice before the request fails
  std::string routing_logic = "load";   // kv-aware | load | round-robin (kv_router.h)
  int64_t kv_peer_fetch_min_tokens = 64;  // kv-aware: pull a peer's prefix when it holds this many more tokens
  int router_workers = 256;  // threads running proxied requests (ProxyPool); more requests queue
  // Set from RouterServeOptions::cache_isolation "api-key": each client key's
  // requests go upstream with cache_salt = TenantCacheSalt(key id, their salt)
  // (scheduler/block_hash.h), so instances, tiers and KV-aware routing keep
  // keys apart.
  bool isolate_api_keys = false;
};

struct RouterServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string port_file;
  std::vector<std::string> api_keys;
  uint64_t max_body_bytes = 8u << 20;
  int64_t idle_timeout_s = 60;
  int64_t drain_timeout_s = 30;
  int grpc_port = -1;  // >= 0: also serve tessera.v1.Tessera (router_grpc.h); 0: any free port
  int64_t max_pending_requests = 1024;  // requests held (parsing, queued, running); beyond: 429
  // --internal-api-key-file: the path (tessera-router's flag) and the key read
  // from it by the command ("" : none). The key is the router's credential on
  // instances (Authorization: Bearer on every call it makes to them, never the
  // client's key) and seeds the KV event subscriptions' CURVE keys.
  std::string internal_api_key_file;
  std::string internal_api_key;
  // --cache-isolation: "none" or "api-key" (docs/architecture.md, "Tenant isolation").
  std::string cache_isolation = "none";
  RouterFlags flags;
};

// Serves until SIGINT/SIGTERM (then drains); the process exit code.
int RunRouter(const RouterServeOptions& options);

}  // namespace tessera
