// GGUF `deepseek2`, llama.cpp's name for DeepSeek-V2/V3 (docs/architecture.md, "Engine"):
// its `deepseek2.*` keys as DeepseekV2Config / DeepseekV3Config fields, the keys a writer
// emits for such a config, and kv_b_proj from the attn_k_b / attn_v_b pair that current
// converters write in its place (legacy files keep attn_kv_b, HF's layout).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/gguf.h"
#include "engine/gguf_meta.h"
#include "engine/model_config.h"

namespace tessera {

// Sets in *c the MLA, MoE, YaRN-mscale and layer-count fields of the deepseek2.* keys
// (the common ones, sizes, rope base, eps and vocabulary, are GgufModelConfig's):
// block_count includes nextn_predict_layers MTP layers; key/value lengths come from the
// *_mla keys when present (split kv_b) and otherwise describe one head (legacy); the
// routing is sigmoid or softmax by expert_gating_func, noaux_tc when the first MoE
// layer has exp_probs_b.bias, else group_limited_greedy with expert_group_count > 1,
// else greedy; yarn_log_multiplier holds 0.1 * mscale_all_dim.
Status GgufDeepseekConfig(const GgufContents& g, const GgufMeta& m, nlohmann::json* c);

// The deepseek2.* keys llama.cpp's converter writes for `c` beyond the common ones
// (MoE layers must be every layer from the first MoE one on).
void AppendDeepseekMetadata(const ModelConfig& c, std::vector<std::pair<std::string, GgufValue>>* md);

// Layer `layer`'s kv_b_proj in HF's layout, [heads * (nope + v), kv_lora] (per head the
// W_UK rows, then the W_UV rows), rebuilt from attn_k_b (per head W_UK transposed,
// [heads][kv_lora][nope]) and attn_v_b ([heads][v][kv_lora]) into *out; both F32, F16 or
// BF16 of one type (returned in *dtype): the rebuild is a transpose, exact. Errors name
// the tensor. Cost: one copy of the pair (MlaAttention::BindKvB splits it again).
Status GgufDeepseekKvB(const GgufContents& g, const ModelConfig& c, int64_t layer, const std::string& label,
                       std::vector<uint8_t>* out, DType* dtype);

// The inverse for writers: kv_b in HF's layout (elements of es bytes) to attn_k_b and
// attn_v_b's bytes (sized as above).
void SplitDeepseekKvB(const uint8_t* kv_b, const ModelConfig& c, int64_t es, uint8_t* k_b, uint8_t* v_b);

}  // namespace tessera
