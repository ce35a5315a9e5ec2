// GGUF models: llama.cpp metadata -> ModelConfig, llama.cpp tensor names <->
// HF names, and the Q/K row permutation llama.cpp's converter applies to
// arch "llama" (HF rotate-half layout -> interleaved pairs).
//
// Supported `general.architecture`: llama (also Mistral and Mixtral files), qwen2, qwen3,
// qwen2moe, qwen3moe, phi3 (Phi-3 and Phi-4: fused attn_qkv, ffn_up holding
// [gate | up], LongRoPE factors as rope_factors_{long,short} tensors), gemma2,
// gemma3 (norms stored as 1 + w, as llama.cpp's converter writes them), gpt-oss,
// deepseek2 (engine/gguf_deepseek.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/gguf.h"
#include "engine/model_config.h"
#include "engine/weight_source.h"
#include "engine/weight_specs.h"

namespace tessera {

// The .gguf file a model path names: `path` itself when it is a regular file;
// the one *.gguf in a directory without *.safetensors (InvalidArgument when
// there are several); "" for anything else (an HF checkpoint directory).
StatusOr<std::string> ResolveGgufPath(const std::string& path);

// Config from `general.architecture` and the `{arch}.*` keys; vocab size,
// tied embeddings and biases from the tensors present. Errors name the key.
StatusOr<ModelConfig> GgufModelConfig(const GgufContents& gguf, const std::string& file_label);

// The `{arch}.*` and `general.*` metadata describing `config` (for writers).
// `arch` is the GGUF architecture (GgufArchFor), e.g. "llama", "qwen3", "gemma2".
std::vector<std::pair<std::string, GgufValue>> GgufModelMetadata(const ModelConfig& config,
                                                                 const std::string& arch,
                                                                 const std::string& name);

// LongRoPE factors as llama.cpp stores them: f32 tensors
// "rope_factors_long.weight" and "rope_factors_short.weight" [rotary_dim / 2];
// empty for other rope scaling.
std::vector<std::pair<std::string, std::vector<float>>> GgufRopeFactorTensors(const ModelConfig& config);

// GGUF architecture for an HF model_type ("mistral" -> "llama"); "" if unsupported.
std::string GgufArchFor(const std::string& model_type);

// llama.cpp tensor name of a weight spec, e.g. "blk.3.attn_q.weight", in GGUF
// architecture `arch` (gpt-oss names the MLP's input norm post_attention_norm).
std::string GgufTensorName(const WeightSpec& spec, const std::string& arch = "");

// Whether llama.cpp permutes attn_q/attn_k rows for this architecture.
inline bool GgufPermutesQk(const std::string& arch) { return arch == "llama"; }

// Reorders the `rows` rows (each `row_bytes` bytes, rows = n_head * head_dim)
// of a Q or K projection. to_gguf: HF order -> llama.cpp order (per head,
// row j*(hd/2)+i goes to 2*i+j); otherwise the inverse. src and dst must not overlap.
void PermuteQkRows(const uint8_t* src, uint8_t* dst, int64_t n_head, int64_t rows, int64_t row_bytes,
                   bool to_gguf);

// Weights of a GGUF file for Model::BindWeights. Q/K of arch "llama" are
// un-permuted into owned memory; everything else points into the mapping.
class GgufWeightSource : public WeightSource {
 public:
  // Opens and validates `path`, parsing its config into *config.
  static StatusOr<std::unique_ptr<GgufWeightSource>> Open(const std::string& path, ModelConfig* config);
  StatusOr<SourceTensor> Get(const WeightSpec& spec) override;
  const GgufFile& file() const { return *file_; }

 private:
  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  std::string arch_;
  std::vector<std::unique_ptr<uint8_t[]>> owned_;  // un-permuted Q/K copies
};

}  // namespace tessera
