// When each request is sent: offsets in seconds from the start of a run.
//
//  - rate = inf: all at time 0 (only --max-concurrency then limits the load);
//  - burstiness = 1: a Poisson process (exponential gaps with mean 1/rate);
//  - otherwise gamma gaps with shape = burstiness and mean 1/rate, as vLLM's
//    benchmark_serving (burstiness < 1: burstier, > 1: more regular);
//  - a trace: its own timestamps, shifted to start at 0 and multiplied by
//    time_scale (0.1 replays ten times faster).
// Deterministic for a given seed.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace tessera::bench {

// `n` gaps between consecutive requests (the first request goes at 0, so a
// run uses gaps [0, n-1)). rate > 0 (may be +inf), burstiness > 0.
std::vector<double> InterArrivalGaps(double rate, double burstiness, int64_t n, uint64_t seed);

// Offsets for `n` requests: 0, g0, g0+g1, ...
std::vector<double> ArrivalOffsets(double rate, double burstiness, int64_t n, uint64_t seed);

// Offsets from trace timestamps (seconds, non-decreasing), scaled.
StatusOr<std::vector<double>> TraceOffsets(const std::vector<double>& timestamps, double time_scale);

}  // namespace tessera::bench
