// Rotary position embedding tables for every rope_scaling variant we support.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model_config.h"

namespace tessera {

// Per-dimension inverse frequencies (rot_dim / 2 of them) after scaling, and the
// factor that multiplies cos and sin (YaRN's attention factor; 1 otherwise).
struct RopeFrequencies {
  std::vector<double> inv_freq;
  double attention_factor = 1.0;
};
// `max_model_len` (0: max_position_embeddings) is the deployment's longest
// sequence; only longrope reads it (UseLongRopeFactors).
RopeFrequencies ComputeRopeFrequencies(const ModelConfig& config, int64_t max_model_len = 0);

// longrope: whether a deployment of `max_model_len` tokens (0: the config's
// max_position_embeddings) rotates with the long factors. Chosen once per
// deployment, as llama.cpp does from its context size: long when max_model_len
// exceeds original_max_position_embeddings. HF switches per call on the current
// length and vLLM per batch; both make a sequence's logits depend on the batch
// (docs/architecture.md, "Batch invariance"). False for other scaling types.
bool UseLongRopeFactors(const ModelConfig& config, int64_t max_model_len);

// cos/sin table in the layout kernels::cpu::Rope reads: row p holds
// cos[0..rot_dim/2) then sin[0..rot_dim/2) of position p (rot_dim =
// config.rotary_dim). Grows on demand.
// Not thread-safe; owned by the model and touched only on the engine thread.
class RopeTable {
 public:
  explicit RopeTable(const ModelConfig& config, int64_t max_model_len = 0);
  // Makes rows [0, num_positions) available; cost O(num_positions * rot_dim) once.
  void EnsurePositions(int64_t num_positions);
  const float* data() const { return table_.data(); }
  int64_t rot_dim() const { return rot_dim_; }
  int64_t num_positions() const { return num_positions_; }

 private:
  RopeFrequencies freqs_;
  int64_t rot_dim_;
  int64_t num_positions_ = 0;
  std::vector<float> table_;
};

}  // namespace tessera
