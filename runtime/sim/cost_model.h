// The twin's cost model (docs/architecture.md, "Twin"): a step's time from its
// composition alone — the prefill chunks (tokens, and the context each attends
// over) and the decode sequences (their context lengths). Everything else the
// twin runs is the serving code; this is the only modelled part.
//
// Implementations: ConstantCostModel (tests), LinearCostModel (coefficients
// from a JSON file, fitted by `tessera calibrate` from micro-runs of the
// binary: fit.h), ReplayCostModel (recorded step times, by step number: the
// decision-equality test feeds the real loop's measured times).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/scheduler.h"

namespace tessera::sim {

// What a step computes, from its plan. A scheduled sequence is a decode when it
// computes its last token(s) after the prompt (1 + drafts tokens from a
// position past the prompt); every other chunk is a prefill (including the
// recompute of a preempted sequence).
struct StepShape {
  int64_t ordinal = 0;  // this step's index among the run's non-empty steps, from 0
  int64_t num_prefill_seqs = 0;
  int64_t prefill_tokens = 0;
  // Sum over prefill tokens of the positions each attends to (itself and
  // before): a chunk of n tokens from position s adds n*s + n*(n+1)/2.
  int64_t prefill_attention = 0;
  int64_t num_decode_seqs = 0;
  int64_t decode_tokens = 0;   // 1 per decode, plus its drafts
  int64_t decode_context = 0;  // sum of the decodes' context lengths (positions attended)
};

// The shape of `plan` (ordinal left 0), whose sequences `scheduler` still
// knows (call between Schedule and UpdateFromOutput).
StepShape ShapeOf(const SchedulerOutput& plan, const Scheduler& scheduler);

class CostModel {
 public:
  virtual ~CostModel() = default;
  // Nanoseconds the step takes; at least 1. Thread-safe (const, no state).
  virtual int64_t StepNs(const StepShape& shape) const = 0;
};

class ConstantCostModel : public CostModel {
 public:
  explicit ConstantCostModel(int64_t step_ns) : step_ns_(step_ns < 1 ? 1 : step_ns) {}
  int64_t StepNs(const StepShape&) const override { return step_ns_; }

 private:
  int64_t step_ns_;
};

// t = base + prefill_token * prefill_tokens + prefill_attention * attended pairs
//       + decode_seq * decodes + decode_token * decode tokens + decode_context * context,
// in milliseconds per unit (the JSON file's keys, below).
struct LinearCoefficients {
  double base_ms = 0;
  double per_prefill_token_ms = 0;
  double per_prefill_attention_ms = 0;
  double per_decode_seq_ms = 0;
  double per_decode_token_ms = 0;
  double per_decode_context_ms = 0;
};

// The JSON keys of LinearCoefficients' fields, in declaration order.
struct CoefficientKey {
  const char* key;
  double LinearCoefficients::*field;
};
const std::array<CoefficientKey, 6>& LinearCoefficientKeys();

// The cost-model file's format version ("version"); a file without one is
// read as version 1 (files written before calibrate existed).
inline constexpr int kCostModelVersion = 1;

class LinearCostModel : public CostModel {
 public:
  explicit LinearCostModel(LinearCoefficients c) : c_(c) {}
  // {"model": "linear", "version": 1, "base_ms": .., "per_prefill_token_ms":
  // .., ..., "calibration": {..}}: every key optional (0) but "model";
  // "calibration" (an object: where and how the coefficients were measured)
  // is provenance for people and is not read. Unknown keys, another version,
  // and negative or non-numeric values are INVALID_ARGUMENT naming the key
  // and `name`.
  static StatusOr<LinearCostModel> FromJson(const std::string& text, const std::string& name);
  static StatusOr<LinearCostModel> FromFile(const std::string& path);
  // The file FromJson reads; `calibration_json` ("" : none) must be a JSON
  // object, written as "calibration".
  std::string ToJson(const std::string& calibration_json = "") const;
  int64_t StepNs(const StepShape& shape) const override;
  const LinearCoefficients& coefficients() const { return c_; }

 private:
  LinearCoefficients c_;
};

// The times of a recorded run, by StepShape::ordinal (past the end of the
// record: its last time). For replaying a measured run.
class ReplayCostModel : public CostModel {
 public:
  explicit ReplayCostModel(std::vector<int64_t> step_ns) : step_ns_(std::move(step_ns)) {}
  int64_t StepNs(const StepShape& shape) const override;

 private:
  std::vector<int64_t> step_ns_;
};

}  // namespace tessera::sim
