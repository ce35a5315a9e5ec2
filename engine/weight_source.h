// WeightSource: where Model::BindWeights gets tensors, by HF name and expected
// shape, whatever the file format (safetensors directory or GGUF file).
#pragma once

#include <cstdint>
#include <string>

#include "common/dtype.h"
#include "common/status.h"
#include "engine/weight_specs.h"

namespace tessera {

struct SourceTensor {
  const void* data = nullptr;  // valid while the source lives
  DType dtype = DType::kF32;   // F32/F16/BF16, or a quantized type for matrices
  int64_t bytes = 0;           // bytes of the tensor as stored
  std::string file;            // for messages
};

// The part of a fused tensor that `spec` names (weight_specs.h): rows
// [row_offset, row_offset + shape[0]) of `whole`, which holds spec.StoredShape();
// `whole` itself when the spec is not fused. A view: no bytes are copied.
inline SourceTensor FusedPart(const WeightSpec& spec, SourceTensor whole) {
  if (spec.stored_rows == 0) return whole;
  const int64_t row_bytes = whole.bytes / spec.stored_rows;
  whole.data = static_cast<const uint8_t*>(whole.data) + spec.row_offset * row_bytes;
  whole.bytes = spec.shape[0] * row_bytes;
  return whole;
}

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The tensor `spec` names, checked to exist (NotFound), to have
  // spec.StoredShape() and a dtype Tessera can use (InvalidArgument /
  // Unimplemented, naming it); for a fused part, the part's rows (FusedPart).
  virtual StatusOr<SourceTensor> Get(const WeightSpec& spec) = 0;
};

}  // namespace tessera
