// The router's command-line flags (docs/architecture.md, "Router"), shared by
// `tessera serve --role router` (cmd_serve.cc registers AddRouterFlags next to
// serve's own flags) and the `tessera-router` binary (router_main.cc: the
// network flags serve also has, then AddRouterFlags). server/router knows no
// CLI library; these fill its RouterFlags / RouterServeOptions.
#pragma once

#include <CLI/CLI.hpp>

#include "common/status.h"
#include "server/router/router.h"

namespace tessera {

// --prefill-instances, --decode-instances, --instances-file,
// --prefill-threshold, --router-poll-interval, --router-dns-interval,
// --max-migrations, --routing-logic, --kv-peer-fetch-min-tokens, --router-workers.
void AddRouterFlags(CLI::App* cmd, RouterFlags* flags);

// --cache-isolation's help, worded the same for `tessera serve` (every role)
// and tessera-router.
inline constexpr const char* kCacheIsolationHelp =
    "which requests share prefix-cache blocks: none (vLLM's: all, unless cache_salt differs), api-key (each "
    "--api-key is its own namespace: prefix hits, tiers, KV events, KV-aware routing; a router carries it to the "
    "instances as cache_salt), salt (every request must carry cache_salt; set on instances)";

// tessera-router's whole command line: --host, --port, --grpc-port,
// --port-file, --api-key, --drain-timeout, --max-body-bytes, --idle-timeout,
// --max-pending-requests (as `tessera serve` words them),
// --internal-api-key-file (the router's credential on instances) and
// AddRouterFlags. Defaults are
// `options`' values on entry.
void AddRouterServeFlags(CLI::App* cmd, RouterServeOptions* options);

// What tessera-router checks before binding, as `tessera serve` checks the
// same flags: no empty --api-key or --host, distinct HTTP and gRPC ports, a
// known --routing-logic, a readable --internal-api-key-file. INVALID_ARGUMENT
// naming the flag.
Status ValidateRouterServeOptions(const RouterServeOptions& options);

}  // namespace tessera
