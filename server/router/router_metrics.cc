#include "server/router/router_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/histogram.h>
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
  const prometheus::Histogram::BucketBoundaries buckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25,
                                                           0.5,   0.75,  1.0,  2.5,  5.0,  10.0, 20.0, 40.0, 80.0};
  prefill_seconds_ = &prometheus::BuildHistogram()
                          .Name("tessera:router_prefill_seconds")
                          .Help("Time of the call to a prefill instance (prompt KV + first token), successful ones.")
                          .Register(*registry_)
                          .Add({}, buckets);
  ttft_ = &prometheus::BuildHistogram()
               .Name("tessera:router_time_to_first_token_seconds")
               .Help("Time from a client request's arrival at the router to its first relayed token.")
               .Register(*registry_)
               .Add({}, buckets);
}

void RouterMetrics::ObservePrefill(double s) { prefill_seconds_->Observe(s); }
void RouterMetrics::ObserveTimeToFirstToken(double s) { ttft_->Observe(s); }

RouterMetrics::~RouterMetrics() = default;

void RouterMetrics::Request(const std::string& route) { requests_->Add({{"route", route}}).Increment(); }

void RouterMetrics::Decision(const std::string& instance, const std::string& role, bool ok) {
  decisions_->Add({{"instance", instance}, {"role", role}, {"outcome", ok ? "ok" : "failed"}}).Increment();
}

void RouterMetrics::PrefillSkipped(const std::string& reason) { skipped_->Add({{"reason", reason}}).Increment(); }

void RouterMetrics::Migration() { migrations_->Increment(); }

std::string RouterMetrics::Serialize() const { return prometheus::TextSerializer().Serialize(registry_->Collect()); }

}  // namespace tessera
