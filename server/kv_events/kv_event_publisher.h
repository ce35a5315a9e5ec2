// KvEventPublisher: the prefix cache's KvCacheEventSink that publishes vLLM
// KV events over ZeroMQ, as vLLM's ZmqEventPublisher does:
//   PUB socket, each message three frames: topic, sequence number (8 bytes,
//   big-endian, from 0), EventBatch payload (kv_event_codec.h);
//   optional ROUTER replay socket: a client sends [empty, start_seq (8 bytes)]
//   and gets [empty, seq, payload] for each buffered batch with seq >=
//   start_seq, then [empty, -1 (8 bytes), empty].
// The first batch (seq 0) is AllBlocksCleared: a restarted instance holds
// nothing, whatever subscribers remember of its previous life.
//
// Threads: the On* methods run on the engine-loop thread and only append to a
// bounded queue under a mutex; one publisher thread owns the sockets, sends a
// batch of what has queued every flush interval and answers replays. When the
// queue is full its events are replaced by one AllBlocksCleared (subscribers
// then under-count this instance's blocks, never over-count) and counted.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "scheduler/kv_cache_events.h"
#include "server/kv_events/kv_event_auth.h"
#include "server/kv_events/kv_event_codec.h"
#include "server/kv_events/kv_events_config.h"

namespace tessera::kv_events {

// vLLM's rule: the PUB endpoint is bound for a wildcard host (tcp://*:N),
// "::", ipc:// and inproc://, and connected otherwise (to a collector that
// binds). Subscribers can connect only to a bound one.
bool PublisherBinds(const std::string& endpoint);

// The endpoint with a wildcard host (tcp://*:N) narrowed to `host` (the
// instance's --host) unless that is itself a wildcard (0.0.0.0, ::): every
// listener binds only the configured address.
std::string NarrowEndpoint(const std::string& endpoint, const std::string& host);

// Whether events sent on `endpoint` (as narrowed) may leave this machine:
// tcp:// to or on anything but a loopback address.
bool EndpointLeavesHost(const std::string& endpoint);

struct KvEventPublisherOptions {
  KvEventsConfig config;
  std::optional<int64_t> data_parallel_rank = 0;
  std::string medium = "GPU";  // vLLM's name for the primary (device) pool
  int flush_interval_ms = 10;
  // The instance's --host: a wildcard endpoint binds it (NarrowEndpoint).
  std::string host = "127.0.0.1";
  // Set with an internal key: both sockets are CURVE servers admitting only
  // the deployment's subscribers (kv_event_auth.h).
  std::optional<KvEventCurveKeys> curve;
};

struct KvEventPublisherStats {
  int64_t batches_published = 0;
  int64_t events_published = 0;
  int64_t events_dropped = 0;  // lost to a full queue
  int64_t replays_served = 0;
  int64_t subscribers_refused = 0;  // CURVE clients without the deployment's key
};

class KvEventPublisher final : public KvCacheEventSink {
 public:
  // Binds (or connects) the sockets and starts the thread. UNAVAILABLE when an
  // endpoint cannot be bound; INVALID_ARGUMENT when events are not enabled.
  static StatusOr<std::shared_ptr<KvEventPublisher>> Start(const KvEventPublisherOptions& options);
  ~KvEventPublisher() override;  // sends what is queued, stops the thread

  void OnBlocksStored(std::optional<BlockHash> parent, std::span<const BlockHash> hashes,
                      std::span<const int32_t> token_ids, int32_t block_size) override;
  void OnBlocksRemoved(std::span<const BlockHash> hashes) override;
  void OnAllBlocksCleared() override;

  KvEventPublisherStats stats() const;
  // The endpoints as bound (a tcp://127.0.0.1:* wildcard port resolved).
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }

 private:
  struct Sockets;
  explicit KvEventPublisher(const KvEventPublisherOptions& options);
  void Push(KvEvent event);
  void Run();

  KvEventPublisherOptions options_;
  void AnswerReplays();
  std::unique_ptr<Sockets> sockets_;
  std::string endpoint_, replay_endpoint_;  // the publisher thread's after Start

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<KvEvent> pending_;  // guarded by mu_
  int64_t pending_count_ = 0;     // events in pending_ (guarded by mu_)
  bool stop_ = false;             // guarded by mu_
  KvEventPublisherStats stats_;   // guarded by mu_
  std::thread thread_;
};

}  // namespace tessera::kv_events
