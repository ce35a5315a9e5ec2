// Hardware limits measured in the same run as a benchmark, so results can be
// stated as fractions of them (bench/RESULTS.md rule).
#pragma once

#include "common/thread_pool.h"

namespace tessera::bench {

// Sustained read bandwidth in bytes/s over a buffer much larger than the caches,
// all pool threads reading disjoint slices. Best of `repeats`.
double MeasureReadBandwidth(ThreadPool& pool, size_t bytes = size_t{1} << 30, int repeats = 5);

// Peak f32 FMA throughput in FLOP/s with AVX2 registers only (no memory), all
// pool threads. 0 when the CPU lacks AVX2/FMA.
double MeasureFmaPeak(ThreadPool& pool);

}  // namespace tessera::bench
