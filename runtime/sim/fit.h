// Fitting the linear cost model (cost_model.h) to measured step times, for
// `tessera calibrate` (docs/architecture.md, "Twin"). Pure arithmetic on
// (StepShape, nanoseconds) samples: no clock, no engine.
//
// The fit minimises the squared RELATIVE error, sum ((predicted - measured) /
// measured)^2, so a 2 ms decode step counts as much as a 400 ms prefill (TPOT
// is made of the small steps), subject to every coefficient >= 0 (each is a
// time per unit of work). It is an exact non-negative least squares: the
// optimum of a problem with k unknowns is the unconstrained optimum on some
// subset of them, so every subset is solved and the best non-negative one
// kept (2^5 small solves; the feature count is fixed and small).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/sim/cost_model.h"

namespace tessera::sim {

struct StepSample {
  StepShape shape;   // ordinal ignored
  int64_t ns = 0;    // measured; > 0
};

// One distinct composition: its samples' median time and the fit's prediction.
struct FitPoint {
  StepShape shape;
  int64_t samples = 0;
  double measured_ms = 0;   // median of the samples
  double predicted_ms = 0;
  double relative_error = 0;  // (predicted - measured) / measured
};

struct CostFit {
  LinearCoefficients coefficients;
  // Coefficient names (LinearCoefficients' JSON keys) the data could not
  // determine: never varied apart from others (e.g. per_decode_token_ms equals
  // per_decode_seq_ms's feature without speculative drafts). Left 0.
  std::vector<std::string> undetermined;
  double r2 = 0;      // of the medians' times (1 - residual / total sum of squares)
  double mape = 0;    // mean |relative_error| over the points
  double max_abs_relative_error = 0;
  std::vector<FitPoint> points;  // one per distinct shape, in first-seen order
};

// Groups `samples` by shape (median time each) and fits the coefficients.
// INVALID_ARGUMENT without samples, with a non-positive time, or without more
// distinct shapes than determinable coefficients (an exact fit tells nothing).
StatusOr<CostFit> FitLinearCostModel(const std::vector<StepSample>& samples);

}  // namespace tessera::sim
