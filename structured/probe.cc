#include "structured/probe.h"

#include <algorithm>
#include <vector>

namespace tessera::structured {
namespace {

// Bytes per walk: nested repetition multiplies its parses within a few dozen
// bytes of where it starts.
constexpr size_t kWalkBytes = 48;
// A walk that ends in a state of at least this many stacks also computes its
// mask there: each stack top may need a table (a walk of the whole vocabulary),
// so a few hundred stacks can cost seconds without reaching max_stacks.
// Ordinary grammars end their walks with a handful.
constexpr size_t kMaskStacks = 16;
// A walk is a few hundred DFA steps; a mask is thousands (one per new state a
// vocabulary walk meets). A walk that needs more than this share of a mask's
// budget means masks far over it.
constexpr int kWalkShare = 5;

Status Refuse(const std::string& why) {
  return InvalidArgument("the constraint is too expensive to enforce: " + why +
                         "; simplify it (e.g. avoid nested counted repetition of optional items)");
}

}  // namespace

Status ProbeGrammar(const std::shared_ptr<const CompiledGrammar>& grammar, const CompileLimits& limits) {
  // On this thread's CPU time: a front-end worker runs at a low priority, and a
  // busy machine must not turn an ordinary grammar into a refusal.
  constexpr auto kCpu = GrammarMatcher::BudgetClock::kThreadCpu;
  auto ns = [](std::chrono::milliseconds ms) { return std::chrono::duration_cast<std::chrono::nanoseconds>(ms).count(); };
  const int64_t end = GrammarMatcher::Now(kCpu) + ns(limits.max_probe_time);
  // Each call gets its budget, but none outlives the probe: past `end` a
  // call fails for lack of probe time, which accepts the grammar.
  auto run = [&](GrammarMatcher* m, int64_t budget, auto&& call) -> Status {
    m->SetBudgetClock(kCpu);
    m->SetDeadline(std::min(end, GrammarMatcher::Now(kCpu) + budget));
    if (call(m) || GrammarMatcher::Now(kCpu) >= end) return Status::Ok();
    return Refuse(m->over_budget());
  };
  const int64_t mask_budget = ns(limits.max_mask_time);
  const int64_t walk_budget = ns(limits.max_mask_time) / kWalkShare;
  std::vector<uint32_t> mask(static_cast<size_t>(grammar->mask_words()));
  auto walk_from = [&](int32_t rule) -> Status {
    GrammarMatcher m(grammar, rule);
    RETURN_IF_ERROR(run(&m, walk_budget, [](GrammarMatcher* w) { return w->GreedyWalk(kWalkBytes); }));
    if (m.num_stacks() < kMaskStacks) return Status::Ok();
    return run(&m, mask_budget, [&](GrammarMatcher* w) { return w->FillMask(mask); });
  };
  // The root's walk first (the cheapest way to meet a bomb), then the first
  // mask a request needs (its tables stay cached), then every other rule's walk.
  const int32_t root = grammar->grammar().root;
  RETURN_IF_ERROR(walk_from(root));
  {
    GrammarMatcher first(grammar);
    RETURN_IF_ERROR(run(&first, mask_budget, [&](GrammarMatcher* m) { return m->FillMask(mask); }));
  }
  for (int32_t r = 0; r < static_cast<int32_t>(grammar->grammar().alts.size()); ++r) {
    if (r == root) continue;
    if (GrammarMatcher::Now(kCpu) >= end) break;
    RETURN_IF_ERROR(walk_from(r));
  }
  return Status::Ok();
}

}  // namespace tessera::structured
