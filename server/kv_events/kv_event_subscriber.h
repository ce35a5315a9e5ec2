// KvEventSubscriber: keeps a KvPrefixIndex up to date from many instances'
// KV-event streams (vLLM's ZeroMQ format, kv_event_publisher.h), one SUB
// socket per instance so each batch is attributed to its sender.
//
// Sequence numbers keep the index honest: a gap (or the first batch of a new
// subscription, which missed the stream so far) is filled from the instance's
// replay socket when it has one, otherwise the instance's entries are
// cleared (under-counting is safe for routing, over-counting is not); a
// sequence going back means the instance restarted, so its entries are cleared
// and, with replay, rebuilt from its buffer. Undecodable batches are counted
// and skipped.
//
// One thread owns every socket. AddSource/RemoveSource are thread-safe and
// take effect within a poll interval; RemoveSource also drops the instance
// from the index. Replays block only this thread, for at most replay_timeout.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "server/kv_events/kv_event_auth.h"
#include "server/kv_events/kv_prefix_index.h"

namespace tessera::kv_events {

struct KvEventSource {
  std::string instance;         // the name the index reports
  std::string endpoint;         // the instance's PUB endpoint, e.g. tcp://10.0.0.5:5557
  std::string replay_endpoint;  // its ROUTER replay endpoint; "" : none
};

struct KvEventSubscriberOptions {
  std::string topic;  // subscription prefix ("" : everything)
  int poll_interval_ms = 20;
  int replay_timeout_ms = 1000;
  // Set with an internal key: SUB and replay sockets are CURVE clients with
  // the deployment's keys (instances with the key accept nothing else).
  std::optional<KvEventCurveKeys> curve = std::nullopt;
};

struct KvEventSubscriberStats {
  int64_t batches_applied = 0;
  int64_t decode_errors = 0;
  int64_t gaps = 0;           // sequence gaps seen (incl. a first batch past 0)
  int64_t replays = 0;        // replay requests answered (catch-up ones included)
  int64_t replay_failures = 0;
  int64_t restarts = 0;       // sequence went back
};

class KvEventSubscriber {
 public:
  // `index` must outlive the subscriber.
  static StatusOr<std::unique_ptr<KvEventSubscriber>> Start(const KvEventSubscriberOptions& options,
                                                            KvPrefixIndex* index);
  ~KvEventSubscriber();

  void AddSource(KvEventSource source);
  void RemoveSource(const std::string& instance);

  KvEventSubscriberStats stats() const;

 private:
  struct Impl;
  explicit KvEventSubscriber(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::kv_events
