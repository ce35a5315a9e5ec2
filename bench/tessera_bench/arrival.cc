#include "bench/tessera_bench/arrival.h"

#include <cmath>
#include <random>
#include <string>

namespace tessera::bench {

std::vector<double> InterArrivalGaps(double rate, double burstiness, int64_t n, uint64_t seed) {
  std::vector<double> gaps(static_cast<size_t>(n > 0 ? n : 0), 0.0);
  if (std::isinf(rate)) return gaps;
  std::mt19937_64 rng(seed);
  // Gamma(shape k, scale theta) has mean k*theta: theta = 1 / (rate * k).
  std::gamma_distribution<double> gamma(burstiness, 1.0 / (rate * burstiness));
  for (auto& g : gaps) g = gamma(rng);
  return gaps;
}

std::vector<double> ArrivalOffsets(double rate, double burstiness, int64_t n, uint64_t seed) {
  std::vector<double> gaps = InterArrivalGaps(rate, burstiness, n, seed);
  std::vector<double> out(gaps.size(), 0.0);
  for (size_t i = 1; i < out.size(); ++i) out[i] = out[i - 1] + gaps[i - 1];
  return out;
}

StatusOr<std::vector<double>> TraceOffsets(const std::vector<double>& timestamps, double time_scale) {
  if (!(time_scale > 0) || std::isinf(time_scale)) {
    return InvalidArgument("--time-scale must be a positive finite number");
  }
  std::vector<double> out;
  out.reserve(timestamps.size());
  for (size_t i = 0; i < timestamps.size(); ++i) {
    if (i > 0 && timestamps[i] < timestamps[i - 1]) {
      return InvalidArgument("trace timestamps decrease at request " + std::to_string(i));
    }
    out.push_back((timestamps[i] - timestamps.front()) * time_scale);
  }
  return out;
}

}  // namespace tessera::bench
