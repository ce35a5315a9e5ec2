#include "scheduler/step_budget.h"

#include <algorithm>

namespace tessera {
namespace {

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

}  // namespace

void StepBudget::Init(Scheduler* scheduler) const {
  if (enabled()) scheduler->SetStepPromptLogprobRows(Scheduler::kMinStepPrefillTokens);
}

void StepBudget::Update(const SchedulerOutput& plan, int64_t took_ns, int64_t logprob_rows, int64_t logprob_ns,
                        Scheduler* scheduler) {
  if (!enabled()) return;
  // Prompt-logprob rows have their own budget: half a step (the tokens get the other half).
  if (logprob_rows > 0) {
    const double row_ms = Ms(logprob_ns) / static_cast<double>(logprob_rows);
    ms_per_prompt_logprob_row_ =
        ms_per_prompt_logprob_row_ == 0 ? row_ms : 0.5 * ms_per_prompt_logprob_row_ + 0.5 * row_ms;
    took_ns -= logprob_ns;
    const double rows = 0.5 * max_step_ms_ / std::max(ms_per_prompt_logprob_row_, 1e-6);
    scheduler->SetStepPromptLogprobRows(static_cast<int64_t>(std::clamp(rows, 1.0, 1e9)));
  }
  int64_t tokens = 0;
  for (const ScheduledSequence& s : plan.seqs) tokens += static_cast<int64_t>(s.token_ids.size());
  if (tokens >= Scheduler::kMinStepPrefillTokens || ms_per_token_ == 0) {
    const double sample = Ms(took_ns) / static_cast<double>(std::max<int64_t>(tokens, 1));
    ms_per_token_ = ms_per_token_ == 0 ? sample : 0.5 * ms_per_token_ + 0.5 * sample;
  }
  const double tokens_in_target = max_step_ms_ / std::max(ms_per_token_, 1e-6);
  scheduler->SetStepTokenBudget(static_cast<int64_t>(std::clamp(tokens_in_target, 1.0, 1e9)));
}

}  // namespace tessera
