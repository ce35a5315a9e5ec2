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

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  // The tensor `spec` names, checked to exist (NotFound), to have spec.shape
  // and a dtype Tessera can use (InvalidArgument / Unimplemented, naming it).
  virtual StatusOr<SourceTensor> Get(const WeightSpec& spec) = 0;
};

}  // namespace tessera
