#include "server/router/instance_resolver.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <set>


#include "server/router/http_client.h"

namespace tessera {

namespace {

bool IsIpLiteral(const std::string& host) {
  in6_addr buf;
  return inet_pton(AF_INET, host.c_str(), &buf) == 1 || inet_pton(AF_INET6, host.c_str(), &buf) == 1;
}

std::string WithPort(const std::string& ip, int port) {
  const std::string p = std::to_string(port);
  return ip.find(':') != std::string::npos ? "[" + ip + "]:" + p : ip + ":" + p;
}

}  // namespace

StatusOr<std::vector<std::string>> ResolveHostAddresses(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0) {
    return Status(StatusCode::kUnavailable, "cannot resolve " + host + ": " + gai_strerror(rc));
  }
  std::vector<std::string> v4, v6;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr, buf, sizeof(buf));
      v4.emplace_back(buf);
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr, buf, sizeof(buf));
      v6.emplace_back(buf);
    }
  }
  freeaddrinfo(res);
  v4.insert(v4.end(), v6.begin(), v6.end());
  return v4;
}

InstanceResolver::InstanceResolver(std::chrono::milliseconds interval, ResolveFn resolve)
    : interval_(interval), resolve_(std::move(resolve)) {}

StatusOr<std::vector<std::string>> InstanceResolver::Expand(const std::vector<std::string>& entries,
                                                            const std::string& what, Clock::time_point now) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  auto add = [&](const std::string& a) {
    if (seen.insert(a).second) out.push_back(a);
  };
  for (const std::string& e : entries) {
    std::string host;
    int port = 0;
    RETURN_IF_ERROR(ParseHostPort(e, what, &host, &port));
    if (IsIpLiteral(host)) {
      add(e);
      continue;
    }
    Name& n = names_[host];
    if (!n.ever || now - n.resolved >= interval_) {
      StatusOr<std::vector<std::string>> r = resolve_(host);
      n.resolved = now;
      if (r.ok() && !r->empty()) {
        // A records when there are any: a dual-stack name (localhost) is one server, not two.
        std::vector<std::string> pick;
        for (const std::string& ip : *r) {
          if (ip.find(':') == std::string::npos) pick.push_back(ip);
        }
        if (pick.empty()) pick = *r;
        std::sort(pick.begin(), pick.end());
        pick.erase(std::unique(pick.begin(), pick.end()), pick.end());
        if (pick != n.addresses || !n.error.empty()) {
          LogInfo("router: {} resolves to {} address(es)", host, pick.size());
        }
        n.addresses = std::move(pick);
        n.ever = true;
        n.error.clear();
      } else {
        const std::string err = r.ok() ? "no addresses" : r.status().message();
        if (err != n.error) {
          LogWarn("router: {}: {}; keeping its {} last address(es)", host, err, n.addresses.size());
        }
        n.error = err;
        n.ever = true;  // retried at the next interval, not on every call
      }
    }
    for (const std::string& ip : n.addresses) add(WithPort(ip, port));
  }
  return out;
}

bool InstanceResolver::Due(Clock::time_point now) const {
  for (const auto& [host, n] : names_) {
    if (!n.ever || now - n.resolved >= interval_) return true;
  }
  return false;
}

}  // namespace tessera
