// The router's Prometheus metrics ("tessera:" prefix like the instances'):
//   tessera:router_requests_total{route}
//   tessera:router_decisions_total{instance, role, outcome}   outcome: ok | failed
//   tessera:router_prefill_skipped_total{reason}             short_prompt | no_prefill | prefill_failed
//   tessera:router_migrations_total                          decode replaced mid-request
//   tessera:router_prefill_seconds                           the prefill call (prompt KV + first token)
//   tessera:router_time_to_first_token_seconds               client request -> first token relayed
// With the decode's tessera:kv_transfer_seconds and request_queue_time_seconds
// these split TTFT into prefill, transfer and decode queueing.
// Thread-safe.
#pragma once

#include <memory>
#include <string>

namespace prometheus {
class Registry;
class Counter;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace tessera {

class RouterMetrics {
 public:
  RouterMetrics();
  ~RouterMetrics();
  void Request(const std::string& route);
  void Decision(const std::string& instance, const std::string& role, bool ok);
  void PrefillSkipped(const std::string& reason);
  void Migration();
  void ObservePrefill(double seconds);
  void ObserveTimeToFirstToken(double seconds);
  std::string Serialize() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* decisions_;
  prometheus::Family<prometheus::Counter>* skipped_;
  prometheus::Counter* migrations_;
  prometheus::Histogram* prefill_seconds_;
  prometheus::Histogram* ttft_;
};

}  // namespace tessera
