// The quantizers behind common/quant.h's QuantizeRow (nothing else should call these).
// Two kinds:
//   - Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4: llama.cpp's gguf-py `quantize`, operation for operation in
//     f32, so the bytes equal gguf-py's (tests/reference/test_gguf_py_oracle.py);
//   - Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS: a simple deterministic fit (min/max per
//     sub-block for the types with mins, signed amax for the symmetric ones, nearest
//     grid value for IQ4), NOT llama.cpp's searched fits: valid blocks whose round-trip
//     error is bounded (tests/unit/common/quant_fit_test.cc), good enough for synthetic
//     weights, not for shipping a model.
// Pure functions of their input; thread-safe. No FMA contraction: this file is compiled
// without -mfma, which the gguf-py equality relies on.
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace tessera::internal {

// n values (a multiple of the type's block) to n / BlockElems blocks at dst. Types other
// than the thirteen above are ignored.
void QuantizeRowFit(const float* src, int64_t n, DType type, void* dst);

}  // namespace tessera::internal
