// Helpers shared by the quantized-Linear tests (quant_test.cc, quant32_test.cc) beyond
// kernel_test_util.h (random inputs, paths): the activation quantization written
// independently of the kernels.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "tests/unit/kernels/kernel_test_util.h"

namespace tessera::kernels::cpu::qtest {

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

inline const char* PathName(Path p) {
  static const char* const kNames[] = {"Scalar", "Avx2", "Vnni", "Default"};
  return kNames[static_cast<int>(p)];
}

}  // namespace tessera::kernels::cpu::qtest
