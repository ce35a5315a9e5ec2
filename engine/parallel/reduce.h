// The one reduction every CPU Communicator uses, so in-process and Gloo ranks
// produce the same bits: out[i] = (((p_0[i] + p_1[i]) + p_2[i]) + ...) in f32,
// parts in rank order; bf16 inputs are widened exactly and the sum rounded to
// bf16 once (round-to-nearest-even).
#pragma once

#include <cstdint>
#include <span>

#include "common/dtype.h"
#include "common/status.h"

namespace tessera::parallel {

// OK for the dtypes AllReduce/ReduceScatter accept (kF32, kBF16).
Status CheckSumDType(DType dtype, std::string_view op);

// parts[r] points at `count` elements of rank r; out may alias parts[0] only.
void SumInRankOrder(std::span<const void* const> parts, void* out, int64_t count, DType dtype);

}  // namespace tessera::parallel
