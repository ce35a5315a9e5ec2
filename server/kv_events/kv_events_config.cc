#include "server/kv_events/kv_events_config.h"

#include <nlohmann/json.hpp>

namespace tessera::kv_events {

StatusOr<KvEventsConfig> ParseKvEventsConfig(std::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("--kv-events-config: must be a JSON object");
  KvEventsConfig c;
  bool publisher_set = false;
  for (const auto& item : j.items()) {
    const std::string key = item.key();  // not a structured binding: clang 14 cannot capture those
    const nlohmann::json& v = item.value();
    auto bad = [&](const char* expect) {
      return InvalidArgument("--kv-events-config: '" + key + "' must be " + expect);
    };
    if (key == "enable_kv_cache_events") {
      if (!v.is_boolean()) return bad("a boolean");
      c.enable_kv_cache_events = v.get<bool>();
    } else if (key == "publisher") {
      if (v.is_null()) continue;
      if (!v.is_string() || (v != "null" && v != "zmq")) return bad("\"null\" or \"zmq\"");
      c.publisher = v.get<std::string>();
      publisher_set = true;
    } else if (key == "endpoint" || key == "replay_endpoint" || key == "topic") {
      if (key == "replay_endpoint" && v.is_null()) continue;
      if (!v.is_string()) return bad("a string");
      (key == "endpoint" ? c.endpoint : key == "topic" ? c.topic : c.replay_endpoint) = v.get<std::string>();
    } else if (key == "buffer_steps" || key == "hwm" || key == "max_queue_size") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t{1} << 30)) {
        return bad("a positive integer");
      }
      (key == "buffer_steps" ? c.buffer_steps : key == "hwm" ? c.hwm : c.max_queue_size) = v.get<int64_t>();
    } else {
      return InvalidArgument("--kv-events-config: unknown field '" + key + "'");
    }
  }
  if (c.enable_kv_cache_events && !publisher_set) c.publisher = "zmq";  // vLLM's default
  if (c.enabled() && c.endpoint.empty()) return InvalidArgument("--kv-events-config: 'endpoint' is empty");
  return c;
}

}  // namespace tessera::kv_events
