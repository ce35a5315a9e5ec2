#include "engine/parallel/reduce.h"

#include <string>
#include <vector>

namespace tessera::parallel {

Status CheckSumDType(DType dtype, std::string_view op) {
  if (dtype == DType::kF32 || dtype == DType::kBF16) return Status::Ok();
  return InvalidArgument(std::string(op) + ": sum of " + std::string(DTypeName(dtype)) +
                         " is not supported (f32 or bf16)");
}

void SumInRankOrder(std::span<const void* const> parts, void* out, int64_t count, DType dtype) {
  const size_t n = parts.size();
  if (dtype == DType::kF32) {
    float* o = static_cast<float*>(out);
    const float* p0 = static_cast<const float*>(parts[0]);
    // Element-outer keeps the rank order per element whatever the aliasing of out and p0.
    for (int64_t i = 0; i < count; ++i) {
      float acc = p0[i];
      for (size_t r = 1; r < n; ++r) acc += static_cast<const float*>(parts[r])[i];
      o[i] = acc;
    }
    return;
  }
  uint16_t* o = static_cast<uint16_t*>(out);
  for (int64_t i = 0; i < count; ++i) {
    float acc = Bf16ToF32(static_cast<const uint16_t*>(parts[0])[i]);
    for (size_t r = 1; r < n; ++r) acc += Bf16ToF32(static_cast<const uint16_t*>(parts[r])[i]);
    o[i] = F32ToBf16(acc);
  }
}

}  // namespace tessera::parallel
