#include "cli/router_flags.h"

#include <string>

#include "common/internal_key.h"
#include "server/router/kv_router.h"

namespace tessera {

void AddRouterFlags(CLI::App* cmd, RouterFlags* f) {
  cmd->add_option("--prefill-instances", f->prefill_instances,
                  "router: prefill instances' HTTP addresses, host:port (comma-separated or repeated)")
      ->delimiter(',');
  cmd->add_option("--decode-instances", f->decode_instances,
                  "router: decode instances' HTTP addresses, host:port (comma-separated or repeated)")
      ->delimiter(',');
  cmd->add_option("--instances-file", f->instances_file,
                  "router: JSON {\"prefill\": [\"host:port\", ...], \"decode\": [...]}, re-read when it changes "
                  "(added to the flags' instances)");
  cmd->add_option("--prefill-threshold", f->prefill_threshold,
                  "router: prompts shorter than this many tokens go straight to a decode instance")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--router-poll-interval", f->poll_interval_s,
                  "router: seconds between load/health polls of each instance (/metrics, /ready)")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 60.0));
  cmd->add_option("--router-dns-interval", f->dns_interval_s,
                  "router: seconds between DNS lookups of instance names; a name (e.g. a Kubernetes headless "
                  "Service) stands for every address it resolves to")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--max-migrations", f->max_migrations,
                  "router: decode instances a choice may move to after failures before the request fails")
      ->capture_default_str()
      ->check(CLI::Range(0, 16));
  cmd->add_option("--routing-logic", f->routing_logic,
                  "router: how an instance is chosen: load (least outstanding work), round-robin, or kv-aware "
                  "(fewest prompt tokens to compute given the KV blocks each instance holds, learned from the "
                  "instances' KV events (--kv-events-config on them), plus load)")
      ->capture_default_str();
  cmd->add_option("--kv-peer-fetch-min-tokens", f->kv_peer_fetch_min_tokens,
                  "router, kv-aware: when another instance holds at least this many more prompt tokens than the "
                  "chosen one and both run KV transfer (--kv-peer-fetch), the chosen one pulls them (0: never)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--router-workers", f->router_workers,
                  "router: threads that run proxied requests (each one's calls to instances); more requests wait "
                  "for a free one, up to --max-pending-requests")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
}

void AddRouterServeFlags(CLI::App* cmd, RouterServeOptions* o) {
  cmd->add_option("--host", o->host, "address to listen on (HTTP and gRPC)")->capture_default_str();
  cmd->add_option("--port", o->port, "HTTP port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("--grpc-port", o->grpc_port, "gRPC port (0: any free port, -1: no gRPC)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 65535));
  cmd->add_option("--port-file", o->port_file, "write {\"http\": N, \"grpc\": M} here once the ports are bound");
  cmd->add_option("--api-key", o->api_keys,
                  "require 'Authorization: Bearer KEY' (repeatable; also $TESSERA_API_KEY); /health, /ready and "
                  "/metrics stay open");
  cmd->add_option("--drain-timeout", o->drain_timeout_s, "seconds SIGTERM waits for in-flight requests")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-body-bytes", o->max_body_bytes, "larger request bodies get 413")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1024}, uint64_t{1} << 30));
  cmd->add_option("--idle-timeout", o->idle_timeout_s, "seconds an idle or slow-sending connection is kept")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--max-pending-requests", o->max_pending_requests,
                  "requests running or queued; beyond it new ones get 429 with Retry-After")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--internal-api-key-file", o->internal_api_key_file,
                  "file whose first line is the deployment's internal key: sent as 'Authorization: Bearer KEY' on "
                  "every call to an instance (a client's own key is never passed on)");
  cmd->add_option("--cache-isolation", o->cache_isolation, kCacheIsolationHelp)->capture_default_str();
  AddRouterFlags(cmd, &o->flags);
}

Status ValidateRouterServeOptions(const RouterServeOptions& o) {
  for (const std::string& k : o.api_keys) {
    if (k.empty()) return InvalidArgument("tessera-router: --api-key must not be empty");
  }
  if (o.host.empty()) return InvalidArgument("tessera-router: --host must not be empty");
  if (o.port > 0 && o.port == o.grpc_port) {
    return InvalidArgument("tessera-router: --port and --grpc-port are both " + std::to_string(o.port) +
                           "; they need different ports");
  }
  if (auto rl = ParseRoutingLogic(o.flags.routing_logic); !rl.ok()) return rl.status();
  if (!o.internal_api_key_file.empty()) {
    if (StatusOr<std::string> key = ReadInternalKeyFile(o.internal_api_key_file); !key.ok()) return key.status();
  }
  if (o.cache_isolation != "none" && o.cache_isolation != "api-key") {
    return InvalidArgument("tessera-router: --cache-isolation must be none or api-key (salt is enforced by the "
                           "instances), got '" + o.cache_isolation + "'");
  }
  if (o.cache_isolation == "api-key" && o.api_keys.empty()) {
    return InvalidArgument("tessera-router: --cache-isolation api-key needs --api-key (each key is a cache namespace)");
  }
  return Status::Ok();
}

}  // namespace tessera
