// Helpers shared by the quantized-Linear tests (quant_test.cc, quant32_test.cc): random
// inputs, the activation quantization written independently of the kernels, and the
// selection of one kernel path (scalar, AVX2, AVX-512 VNNI) through the testing overrides.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"

namespace tessera::kernels::cpu::qtest {

inline std::vector<float> RandomVec(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// The activation quantization Linear documents (ops.h), written independently:
// per block of `block`, d = amax / 127, q = round-half-even(clamp(x / d, +-127)).
inline std::vector<double> QuantDequantActs(const float* x, int64_t k, int64_t block) {
  std::vector<double> out(k);
  for (int64_t b = 0; b < k / block; ++b) {
    float amax = 0.0f;
    for (int64_t l = 0; l < block; ++l) amax = std::max(amax, std::fabs(x[b * block + l]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int64_t l = 0; l < block; ++l) {
      const float v = std::clamp(x[b * block + l] * id, -127.0f, 127.0f);
      out[b * block + l] = static_cast<double>(d) * std::nearbyint(v);
    }
  }
  return out;
}

inline bool BitEqual(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

// kDefault: the detected dispatch, which on a VNNI CPU mixes AVX2 (small m) and VNNI.
enum class Path { kScalar, kAvx2, kVnni, kDefault };

inline void ClearPath() {
  ClearUseAvx2ForTesting();
  ClearUseAvx512VnniForTesting();
}

// Selects one kernel path; false when this CPU lacks it.
inline bool UsePath(Path p) {
  if (p == Path::kDefault) {
    ClearPath();
    return true;
  }
  if (!SetUseAvx2ForTesting(p != Path::kScalar)) return false;
  return SetUseAvx512VnniForTesting(p == Path::kVnni);
}

inline const char* PathName(Path p) {
  static const char* const kNames[] = {"Scalar", "Avx2", "Vnni", "Default"};
  return kNames[static_cast<int>(p)];
}
inline void PrintTo(Path p, std::ostream* os) { *os << PathName(p); }

}  // namespace tessera::kernels::cpu::qtest
