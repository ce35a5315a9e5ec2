#include "runtime/sim/twin.h"

#include <utility>

#include "runtime/sim/twin_instance.h"

namespace tessera::sim {

Status CheckArrivalOrder(const std::vector<TwinRequest>& requests) {
  for (size_t i = 1; i < requests.size(); ++i) {
    if (requests[i].arrival_ns < requests[i - 1].arrival_ns) {
      return InvalidArgument("twin: request '" + requests[i].id + "' arrives before the one listed ahead of it");
    }
  }
  return Status::Ok();
}

StatusOr<TwinResult> RunTwin(TwinOptions options, const std::vector<TwinRequest>& requests) {
  RETURN_IF_ERROR(CheckArrivalOrder(requests));
  ASSIGN_OR_RETURN(std::unique_ptr<TwinInstance> twin, TwinInstance::Create(std::move(options)));
  TwinResult result;
  result.requests.resize(requests.size());
  // Every request is in the inbox from the start: the instance drains those
  // that have arrived by each step's begin, and jumps to the next arrival when idle.
  for (size_t i = 0; i < requests.size(); ++i) {
    TwinSubmission sub;
    sub.request = requests[i];
    sub.at_ns = requests[i].arrival_ns;
    sub.result = &result.requests[i];
    twin->Submit(std::move(sub));
  }
  while (twin->NextEventNs() != kNever) RETURN_IF_ERROR(twin->Advance());
  if (!twin->Idle()) return Internal("twin: the instance stopped with requests unfinished");
  result.stats = twin->stats();
  return result;
}

}  // namespace tessera::sim
