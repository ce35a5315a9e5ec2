// HF checkpoints that stack a layer's experts in one tensor (gpt-oss
// `mlp.experts.gate_up_proj` and friends; WeightSpec::stacked): one expert's
// matrix or bias read out of the stack, with gate and up de-interleaved and the
// dense x @ W layout transposed, into memory the caller keeps.
//
// MXFP4 experts (`<name>_blocks` u8 [E, rows, cols/32, 16] and `<name>_scales`
// u8 [E, rows, cols/32], E8M0 exponents) are repacked into ggml's MXFP4 blocks
// (DType::kMXFP4: the exponent byte, then 16 bytes whose low nibbles are
// elements 0..15 and high nibbles 16..31), the bytes llama.cpp's converter
// writes to GGUF, so HF and GGUF load to the same bytes and one kernel runs both.
// An HF block holds element 2i in the low and 2i+1 in the high nibble of byte i.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "engine/safetensors.h"
#include "engine/weight_source.h"
#include "engine/weight_specs.h"

namespace tessera {

// One expert's part of the stacked tensor spec.name (spec.stacked): a matrix
// [shape[0], shape[1]] (F32/F16/BF16 stored [E, cols, stored_rows], or MXFP4
// blocks/scales stored [E, stored_rows, ...]) or a bias [shape[0]] (stored
// [E, stored_rows]). The bytes are copied into `owned`. Refusals name the
// tensor: missing, wrong shape or dtype.
StatusOr<SourceTensor> ReadStackedExpert(const WeightStore& store, const WeightSpec& spec, int64_t num_experts,
                                         std::vector<std::unique_ptr<uint8_t[]>>* owned);

// ggml MXFP4 blocks (17 bytes each) of one row from HF's `blocks` (16 bytes per
// block) and `scales` (one byte per block).
void RepackMxfp4Row(const uint8_t* blocks, const uint8_t* scales, int64_t num_blocks, uint8_t* out);
// The inverse (synthetic checkpoints write HF MXFP4 from ggml blocks).
void UnpackMxfp4Row(const uint8_t* ggml, int64_t num_blocks, uint8_t* blocks, uint8_t* scales);

}  // namespace tessera
