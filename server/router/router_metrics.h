// The router's Prometheus metrics ("tessera:" prefix like the instances'):
//   tessera:router_requests_total{route}
//   tessera:router_decisions_total{instance, role, outcome}   outcome: ok | failed
//   tessera:router_prefill_skipped_total{reason}             short_prompt | no_prefill | prefill_failed
//   tessera:router_migrations_total                          decode replaced mid-request
// Thread-safe.
#pragma once

#include <memory>
#include <string>

namespace prometheus {
class Registry;
class Counter;
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
  std::string Serialize() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* decisions_;
  prometheus::Family<prometheus::Counter>* skipped_;
  prometheus::Counter* migrations_;
};

}  // namespace tessera
