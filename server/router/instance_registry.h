// InstanceRegistry: the router's view of its prefill and decode instances —
// from flags or a JSON file re-read when it changes, DNS names expanded to
// all their addresses (instance_resolver.h) — with their load
// (outstanding tokens the router sent them, plus running and waiting
// sequences polled from their /metrics) and health. An instance that fails a
// call or a poll leaves rotation and is retried with exponential backoff.
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/status.h"
#include "server/router/http_client.h"
#include "server/router/instance_resolver.h"

namespace tessera {

enum class InstanceRole { kPrefill, kDecode };
const char* InstanceRoleName(InstanceRole role);

struct InstanceRef {
  std::string address;  // host:port
  std::string host;
  int port = 0;
};

struct InstanceSnapshot {
  InstanceRef ref;
  InstanceRole role = InstanceRole::kDecode;
  bool healthy = true;
  int64_t outstanding_tokens = 0;
  int64_t queue_depth = 0;  // running + waiting sequences at the last poll
  double kv_usage = 0;      // tessera:kv_cache_usage_perc at the last poll (0..1)
  int64_t waiting = 0;      // waiting sequences at the last poll (part of queue_depth)
};

class InstanceRegistry {
 public:
  struct Options {
    std::vector<std::string> prefill, decode;
    std::string file;
    std::chrono::milliseconds poll_interval{500};
    std::chrono::milliseconds dns_interval{5000};  // re-resolution of names (headless Services)
    // The router's credential on instances (--internal-api-key-file); empty: none.
    std::string upstream_key;
  };
  static StatusOr<std::unique_ptr<InstanceRegistry>> Create(const Options& options);
  ~InstanceRegistry();

  // The healthy instance of `role` with the least load, skipping `exclude`;
  // nullopt when none. Load: outstanding tokens + 256 per queued sequence.
  std::optional<InstanceRef> Pick(InstanceRole role, const std::vector<std::string>& exclude = {});
  void AddOutstanding(const std::string& address, int64_t tokens);
  // A call failed: out of rotation until a poll succeeds (backoff 0.25 s .. 8 s).
  void MarkFailed(const std::string& address);
  std::vector<InstanceSnapshot> Snapshot() const;
  // Some instance of `role` is healthy and has answered a poll (the router's /ready).
  bool AnyHealthy(InstanceRole role) const;
  // The instance at `address` is in rotation (false when unknown).
  bool Healthy(const std::string& address) const;
  // Options for a call to an instance: the router's own credential set (never
  // a client's), the rest defaults. Every call the router makes starts here.
  HttpCallOptions CallOptions() const;
  // Every decode instance said (in /server_info, learnt when it first
  // answers or comes back) that its finished /v1/responses live in a store
  // of `kind` ("redis"): any of them can serve a stored id. False while one
  // is unknown or says otherwise.
  bool DecodeResponsesStoreIs(std::string_view kind) const;

 private:
  struct Instance {
    InstanceRef ref;
    InstanceRole role;
    bool healthy = true;    // optimistic until a poll or call fails
    bool answered = false;  // a poll has succeeded (readiness needs one)
    int64_t outstanding = 0;
    int64_t queue = 0;
    double kv_usage = 0;
    int64_t waiting = 0;
    std::chrono::milliseconds backoff{0};
    std::chrono::steady_clock::time_point next_poll{};
    std::string responses_store;  // /server_info's "responses_store" ("": not learnt)
  };
  InstanceRegistry() = default;
  // Entries as configured (names unresolved); resolves them (blocking DNS: poller thread or Create only).
  Status SetLists(const std::vector<std::string>& prefill, const std::vector<std::string>& decode);
  void ReloadFile();
  void PollLoop();

  Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Instance> instances_;  // by "role/address"
  std::string file_stamp_;
  // Poller thread (and Create, before it starts) only, like SetLists:
  std::unique_ptr<InstanceResolver> resolver_;
  std::vector<std::string> configured_[2];  // prefill, decode entries as given (names unresolved)
  bool stop_ = false;
  std::thread poller_;
};

}  // namespace tessera
