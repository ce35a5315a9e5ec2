// WeightsDigest: one SHA-256 that names a checkpoint's weights, for receipts
// (docs/architecture.md, "Receipts"). It covers every tensor of the checkpoint
// (safetensors directory or GGUF file), in ascending name order: for each,
// its name, stored dtype, shape and bytes, each length-prefixed so no two
// checkpoints frame to the same stream. The digest therefore does not depend
// on how the tensors are split over files, on file order, on metadata, or on
// how many ranks load them.
//
// Cost: one read of every weight byte (~1-2 GB/s): seconds for a 7B model,
// so the result is cached in a small JSON file keyed by each weight file's
// name, size and mtime; a second load with unchanged files reads only that.
// The cache lives beside the checkpoint (<dir>/.tessera-weights.sha256.json,
// for a .gguf path <file>.tessera-weights.sha256.json); when that place is
// not writable, under options.fallback_cache_dir. Thread-safe (no shared state).
#pragma once

#include <string>

#include "common/sha256.h"
#include "common/status.h"

namespace tessera {

struct WeightsDigestOptions {
  // Where the cache goes when the checkpoint's own directory is read-only
  // ("" : no fallback; the digest is then recomputed at every load).
  std::string fallback_cache_dir;
  bool use_cache = true;
};

struct WeightsDigestResult {
  Sha256Digest digest{};
  bool from_cache = false;
  std::string cache_path;  // where it was read or written ("" : nowhere)
};

// `model_path`: what Model::Load takes (an HF directory, a .gguf file, or a
// directory holding one .gguf).
StatusOr<WeightsDigestResult> ComputeWeightsDigest(const std::string& model_path,
                                                   const WeightsDigestOptions& options = {});

}  // namespace tessera
