// StepBudget: time-bounded steps (docs/architecture.md, "Time-bounded steps")
// as a policy over measured times. After each step it turns the step's
// duration into the next steps' token budget (Scheduler::SetStepTokenBudget)
// and prompt-logprob row budget. It reads no clock: the engine loop hands it
// wall time, the twin (runtime/sim/) virtual time, so both make the same
// decision from the same number. Not thread-safe (engine-loop thread).
#pragma once

#include <cstdint>

#include "scheduler/scheduler.h"

namespace tessera {

class StepBudget {
 public:
  // max_step_ms <= 0: off (Init and Update do nothing).
  explicit StepBudget(double max_step_ms) : max_step_ms_(max_step_ms) {}
  bool enabled() const { return max_step_ms_ > 0; }

  // Before the first step: prompt-logprob rows go a few at a time until a step measured them.
  void Init(Scheduler* scheduler) const;

  // After `plan` ran in `took_ns`, of which `logprob_ns` went to `logprob_rows`
  // prompt-logprob rows. Steps of fewer than kMinStepPrefillTokens tokens say
  // little about a prefill token's cost (fixed costs dominate), so only larger
  // ones update the per-token estimate; the first estimate comes from the first
  // step, which errs on the small-chunk side.
  void Update(const SchedulerOutput& plan, int64_t took_ns, int64_t logprob_rows, int64_t logprob_ns,
              Scheduler* scheduler);

  double ms_per_token() const { return ms_per_token_; }

 private:
  double max_step_ms_ = 0;
  double ms_per_token_ = 0;  // EMA of step time per scheduled token (0: no sample yet)
  double ms_per_prompt_logprob_row_ = 0;
};

}  // namespace tessera
