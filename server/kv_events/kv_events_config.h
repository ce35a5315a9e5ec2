// --kv-events-config: vLLM's KVEventsConfig, same JSON fields and defaults
// (vllm/config/kv_events.py), e.g.
//   {"enable_kv_cache_events": true, "publisher": "zmq",
//    "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558", "topic": "kv"}
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tessera::kv_events {

struct KvEventsConfig {
  bool enable_kv_cache_events = false;
  // "null" (events off) or "zmq". Unset with events enabled means "zmq".
  std::string publisher = "null";
  // PUB socket. Bound when it names a wildcard host (tcp://*:N), ipc:// or
  // inproc://, else connected (as vLLM does).
  std::string endpoint = "tcp://*:5557";
  // ROUTER socket answering replay requests from the last buffer_steps
  // batches; "" : no replay.
  std::string replay_endpoint;
  int64_t buffer_steps = 10000;    // batches kept for replay
  int64_t hwm = 100000;            // ZeroMQ send high-water mark (messages)
  int64_t max_queue_size = 100000; // events waiting for the publisher thread
  std::string topic;               // first frame of every message

  bool enabled() const { return enable_kv_cache_events && publisher == "zmq"; }
};

// Parses the flag's JSON object. Unknown fields and wrong types are
// INVALID_ARGUMENT naming the field.
StatusOr<KvEventsConfig> ParseKvEventsConfig(std::string_view json);

}  // namespace tessera::kv_events
