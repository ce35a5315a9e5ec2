// One twin instance, stepped by a driver (docs/architecture.md, "Twin"): the
// real Scheduler and its KvCacheManager, driven in EngineLoop::Step's order —
// drain the inbox, the KV connectors' between-steps work, Schedule(), the step
// (its time from the cost model), UpdateFromOutput(), StepBudget::Update —
// with the step split into two events on the virtual clock, its begin and its
// end, so that a driver running several instances (cluster.h) can interleave
// them in time order. RunTwin (twin.h) drives one; RunCluster many.
//
// Waking follows EngineLoop::ThreadMain: an instance steps when it has a
// runnable sequence, a request in its inbox, or a KV load that has finished;
// after a step that planned nothing while loads are in flight it waits for one.
// Single-threaded; results are written through the caller's pointers.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "runtime/sim/twin.h"
#include "scheduler/kv_connector.h"
#include "scheduler/scheduler.h"
#include "scheduler/step_budget.h"

namespace tessera::sim {

inline constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// The executor half of a twin's KV connector (the twin's stand-in for
// runtime/kv_connectors' KvConnectorWorker): what moves bytes, in virtual time.
class TwinKvWorker {
 public:
  virtual ~TwinKvWorker() = default;
  // Between steps at `now_ns`, before Schedule(): ends loads done by now,
  // applies releases, plans new loads.
  virtual void BeforeStep(Scheduler& scheduler, int64_t now_ns) = 0;
  // When the next load (or release) it owes completes; kNever: none.
  virtual int64_t NextDoneNs() const = 0;
  virtual bool LoadsInFlight() const = 0;
};

// A request as it reaches an instance's inbox.
struct TwinSubmission {
  TwinRequest request;  // arrival_ns: the client's arrival (what latencies count from)
  int64_t at_ns = 0;    // when it reaches this instance (its Request::arrival_time_ns)
  TwinRequestResult* result = nullptr;  // not owned; gets its tokens and outcome
  bool export_kv = false;               // PD prefill: hold its prompt's blocks on finish
  std::optional<RemoteKvSource> remote_kv;  // PD decode: pull the prompt's blocks
};

class TwinInstance {
 public:
  // `connector` and `worker` (both or neither; not owned) are registered as
  // the scheduler's one KV connector. Options are checked as RunTwin's.
  static StatusOr<std::unique_ptr<TwinInstance>> Create(TwinOptions options, KvConnector* connector = nullptr,
                                                        TwinKvWorker* worker = nullptr);

  void Submit(TwinSubmission submission);

  // The instance's next event: the end of its step in flight, else the begin
  // of its next step; kNever when it waits for nothing.
  int64_t NextEventNs() const;
  bool step_in_flight() const { return in_flight_; }
  // Runs that event (the clock moves to it): a step's begin or its end.
  Status Advance();

  // Requests that ended (finished or refused) since the last call, by id.
  std::vector<std::string> TakeEnded();
  bool Idle() const { return !in_flight_ && inbox_.empty() && !scheduler_->HasUnfinished(); }

  int64_t now_ns() const { return now_ns_; }
  const Scheduler& scheduler() const { return *scheduler_; }
  Scheduler& mutable_scheduler() { return *scheduler_; }
  int64_t unfinished() const { return scheduler_->num_running() + scheduler_->num_waiting(); }
  // Steps, KV usage and the scheduler's counters so far (connectors' included).
  TwinStats stats() const;

 private:
  TwinInstance() = default;
  void Drain();
  Status Begin();
  Status End();
  bool Runnable() const;
  // A KV load is in flight, a release is due, or blocks are held for a peer:
  // an empty plan then waits for that event instead of being a bug.
  bool AwaitsKvEvent() const;

  TwinOptions options_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<StepBudget> budget_;
  TwinKvWorker* worker_ = nullptr;
  int64_t now_ns_ = 0;
  std::deque<TwinSubmission> inbox_;  // by at_ns (submitted in time order)
  std::unordered_map<std::string, TwinRequestResult*> active_;
  std::vector<std::string> ended_;
  bool last_plan_empty_ = false;
  // The step in flight (between Begin and End).
  bool in_flight_ = false;
  SchedulerOutput plan_;
  int64_t step_ns_ = 0;
  int64_t end_ns_ = 0;  // last request end
  int64_t steps_ = 0;
  double kv_usage_sum_ = 0, kv_usage_max_ = 0;
};

}  // namespace tessera::sim
