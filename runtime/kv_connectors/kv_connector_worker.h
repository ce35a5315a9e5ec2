// KvConnectorWorker: the executor's half of a KV connector (the scheduler's
// half is scheduler/kv_connector.h; docs/architecture.md, "KV connectors").
// It moves the bytes the scheduler decided to move: between steps it applies
// the answers its threads produced and starts the loads the scheduler
// planned; after a step it saves blocks (reads them out of the pool while
// they are valid). A connector implements both halves in one class
// (tier_connector.h, transfer_connector.h).
//
// Threading: every method runs on the engine-loop thread (or, for Stop, after
// the loop thread ended). Long work — network, disk, Redis — runs on the
// connector's own threads; they wake the loop through the `notify` the engine
// loop gave the connector at creation. Pool memory is read and written only
// here, between steps, or by a load whose destination blocks the scheduler
// holds for it until FinishKvLoad.
#pragma once

#include <string>

namespace tessera {

class KvCache;
class Scheduler;
struct RequestOutput;

class KvConnectorWorker {
 public:
  virtual ~KvConnectorWorker() = default;

  // Before the step's Schedule(): applies what arrived since the last call
  // (Scheduler::AllocateKvLoad, writes into the pool, FinishKvLoad; released
  // holds), asks the scheduler to plan this connector's loads
  // (Scheduler::PlanKvLoads) and hands them to its threads.
  virtual void BeforeStep(Scheduler& scheduler, KvCache& cache) = 0;
  // After a step (and after requests ended between steps): saves what the
  // scheduler half recorded (blocks computed here, blocks held for a peer)
  // before the next Schedule() may reuse them.
  virtual void AfterStep(KvCache& cache) = 0;
  // Loads whose destination blocks are held are in flight: a step that
  // planned nothing may become possible only when one answers (the loop then
  // waits for `notify` instead of spinning).
  virtual bool LoadsInFlight() const { return false; }
  // A request's last output: adds what this connector tells the client
  // (where its held KV can be pulled from). `out` may be modified.
  virtual void OnFinalOutput(const std::string& /*request_id*/, RequestOutput* /*out*/) {}
  // The request left the engine loop: drop what is kept for its final output.
  virtual void ForgetRequest(const std::string& /*request_id*/) {}
  // Stops the connector's loads (each in progress ends within its own
  // timeout) and applies every answer, so no block stays held for a load.
  virtual void Stop(Scheduler& /*scheduler*/) {}
};

}  // namespace tessera
