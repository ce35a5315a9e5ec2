// ProbeGrammar: the admission check of a compiled grammar's per-step cost
// (docs/architecture.md, "Time-bounded steps"). Compiling is bounded
// (CompileLimits), but a small grammar can still make every next-token mask
// expensive: nested counted repetition of a nullable or overlapping item
// (regex `((a?){1,30}){1,30}`, the same in GBNF, a JSON Schema `pattern` or
// a tool's parameters) parses each byte in thousands of ways. The probe runs
// what a request would, under the matchers' own bounds (max_mask_time,
// max_stacks): the first mask, then from the root and from every rule a walk
// that steers toward the state with the most parse stacks, and the mask there
// when that state holds many (each stack may need a table). A walk may take a
// fifth of max_mask_time (it is a few hundred DFA steps; a mask is thousands).
// A walk or mask over a bound refuses the grammar; running out of `max_probe_time` overall accepts
// it (the matchers stay bounded at run time, so a grammar the probe did not
// reach fails its request mid-generation instead of stalling a step).
//
// Budgets are on the calling thread's CPU time (a front-end worker at a low
// priority: a loaded machine must not change the verdict), so the wall time
// can be longer under load. Cost: at most max_probe_time of CPU;
// results are cached with the grammar by StructuredOutputs. Thread-safe.
#pragma once

#include <memory>

#include "common/status.h"
#include "structured/grammar.h"
#include "structured/matcher.h"

namespace tessera::structured {

// OK, or INVALID_ARGUMENT saying which bound a walk exceeded.
Status ProbeGrammar(const std::shared_ptr<const CompiledGrammar>& grammar, const CompileLimits& limits);

}  // namespace tessera::structured
