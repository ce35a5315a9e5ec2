#include "server/router/router_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace tessera {

RouterMetrics::RouterMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  requests_ = &prometheus::BuildCounter()
                   .Name("tessera:router_requests_total")
                   .Help("Client requests received by the router, by route.")
                   .Register(*registry_);
  decisions_ = &prometheus::BuildCounter()
                    .Name("tessera:router_decisions_total")
                    .Help("Calls the router sent to each instance, by role and outcome.")
                    .Register(*registry_);
  skipped_ = &prometheus::BuildCounter()
                  .Name("tessera:router_prefill_skipped_total")
                  .Help("Requests decoded without a remote prefill, by reason.")
                  .Register(*registry_);
  migrations_ = &prometheus::BuildCounter()
                     .Name("tessera:router_migrations_total")
                     .Help("Choices resubmitted to another decode instance after one failed mid-stream.")
                     .Register(*registry_)
                     .Add({});
}

RouterMetrics::~RouterMetrics() = default;

void RouterMetrics::Request(const std::string& route) { requests_->Add({{"route", route}}).Increment(); }

void RouterMetrics::Decision(const std::string& instance, const std::string& role, bool ok) {
  decisions_->Add({{"instance", instance}, {"role", role}, {"outcome", ok ? "ok" : "failed"}}).Increment();
}

void RouterMetrics::PrefillSkipped(const std::string& reason) { skipped_->Add({{"reason", reason}}).Increment(); }

void RouterMetrics::Migration() { migrations_->Increment(); }

std::string RouterMetrics::Serialize() const { return prometheus::TextSerializer().Serialize(registry_->Collect()); }

}  // namespace tessera
