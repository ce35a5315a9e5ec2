// InstanceResolver: the router's configured instance entries (host:port, from
// the flags and --instances-file) into the addresses it calls. An entry whose
// host is an IP literal passes through unchanged. A DNS name — a Kubernetes
// headless Service, whose name resolves to one A record per ready pod —
// becomes one ip:port entry per address (IPv4 when the name has any A record,
// else IPv6 as [addr]:port), re-resolved once `interval` has passed, so pods
// joining or leaving a pool are followed while the router runs. A name that
// fails to resolve keeps its last addresses (a warning on each change of
// error); a name never resolved yields no instance until it does.
// Not thread-safe: one owner (the registry's poller) calls it. Resolving
// blocks on DNS: call it outside locks that request paths take.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera {

// Every address `host` resolves to (getaddrinfo, TCP), IPv4 first, as numeric strings.
StatusOr<std::vector<std::string>> ResolveHostAddresses(const std::string& host);

class InstanceResolver {
 public:
  using ResolveFn = std::function<StatusOr<std::vector<std::string>>(const std::string& host)>;
  using Clock = std::chrono::steady_clock;

  explicit InstanceResolver(std::chrono::milliseconds interval, ResolveFn resolve = ResolveHostAddresses);

  // The addresses of `entries` (duplicates removed, in entry order; a name's
  // addresses sorted). Fails only for an entry that is not host:port (`what`
  // names the flag in the message).
  StatusOr<std::vector<std::string>> Expand(const std::vector<std::string>& entries, const std::string& what,
                                            Clock::time_point now = Clock::now());
  // True when a name seen by Expand is older than the interval (or never resolved).
  bool Due(Clock::time_point now = Clock::now()) const;

 private:
  struct Name {
    std::vector<std::string> addresses;  // ip:port strings without the port: numeric hosts
    Clock::time_point resolved{};
    bool ever = false;
    std::string error;  // the last failure's message, "" after a success
  };
  std::chrono::milliseconds interval_;
  ResolveFn resolve_;
  std::map<std::string, Name> names_;  // by host name
};

}  // namespace tessera
