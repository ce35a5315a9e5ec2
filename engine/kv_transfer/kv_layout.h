// What two instances must agree on before KV bytes move between them: the
// block layout (block size, dtype, layers, KV heads, head dim) and the model
// (a fingerprint of its config and weights). Plus the per-block checksum.
#pragma once

#include <cstdint>
#include <string>

#include "common/dtype.h"
#include "common/status.h"
#include "engine/model_config.h"

namespace tessera {

struct KvLayout {
  int32_t block_size = 16;
  DType dtype = DType::kF32;
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  bool operator==(const KvLayout&) const = default;
};

KvLayout MakeKvLayout(const ModelConfig& config, DType dtype, int32_t block_size);
std::string DescribeKvLayout(const KvLayout& layout);
// OK when equal; otherwise FAILED_PRECONDITION naming every field that differs
// (`local`: the exporting instance, `remote`: the pulling one).
Status CheckKvLayout(const KvLayout& local, const KvLayout& remote);

// Hex digest of config.json (or the .gguf metadata region) and a sample of the
// weight bytes of every weight file (its size and first and last MiB): two
// instances with equal fingerprints serve the same checkpoint. O(MiB) of I/O.
StatusOr<std::string> ModelFingerprint(const std::string& model_path);

// 64-bit FNV-1a continued from `seed` (use 0 to start). Not cryptographic:
// catches corruption in transit, not a malicious peer.
uint64_t KvChecksum(const void* data, uint64_t bytes, uint64_t seed = 0);

}  // namespace tessera
