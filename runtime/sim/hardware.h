// A cost model derived from published hardware figures, for machines not at
// hand (docs/architecture.md, "Twin"): the same LinearCoefficients a fit on
// the machine gives (cost_model.h), from the model's shape (parameter bytes,
// FLOPs per token, KV bytes per token of context) and the device's memory
// bandwidth, dense FLOP/s and interconnect bandwidth. A roofline estimate,
// marked "derived" in the file; a calibration on the device replaces it.
//
// Per TP rank of a degree-t instance (bytes and FLOPs divide by t):
//   base_ms                  = weight bytes / t / BW  +  2 L all-reduce latencies (t > 1)
//   per_prefill_token_ms     = 2 * active params / t / FLOPS  +  all-reduce bytes per token / link BW
//   per_decode_token_ms      = the same (a decode token is a prefill token's matmuls)
//   per_prefill_attention_ms = 4 L * q_heads * head_dim / t / FLOPS   (QK^T and PV per attended pair)
//   per_decode_context_ms    = KV bytes per token / t_kv / BW  +  the attention FLOPs per position
// The two roofline terms are added, not max()ed (the file is linear): far
// from the ridge point this is the max; at it, at most twice it — pessimistic,
// the safe side for a plan. Published peaks are not reached by real kernels
// (optimistic), and per-step host overhead is not modelled. Exactness is not
// the claim: a calibration on the device is (tessera calibrate).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/sim/cost_model.h"

namespace tessera::sim {

// Published per-device figures; GB = 1e9 bytes.
struct HardwareSpec {
  std::string name;
  double memory_bw_gbs = 0;    // HBM/GDDR bandwidth
  double tflops = 0;           // dense BF16 tensor-core peak
  double interconnect_gbs = 0; // per direction, device to device (NVLink; PCIe without it)
  double memory_gb = 0;        // device memory
};

// The built-in table (h100-sxm, h200, a100-80g, l40s), in that order.
const std::vector<HardwareSpec>& HardwareTable();
// A table entry by name; INVALID_ARGUMENT listing the names otherwise.
StatusOr<HardwareSpec> FindHardware(const std::string& name);

// What the derivation needs of a model (the CLI fills it from ModelConfig:
// the runtime does not see engine/).
struct ModelShape {
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t num_q_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t num_parameters = 0;         // all weights (every expert)
  int64_t num_active_parameters = 0;  // those one token multiplies (top-k experts)
  int64_t kv_bytes_per_token = 0;     // all layers, at the KV dtype
  double bytes_per_parameter = 2;     // BF16 weights
};

struct DeriveOptions {
  int tensor_parallel_size = 1;
  // Fixed cost of one all-reduce (launch and synchronisation); two per layer.
  double allreduce_latency_us = 10;
};

// INVALID_ARGUMENT for a shape or spec with non-positive figures, or heads
// that do not split over the TP degree.
StatusOr<LinearCoefficients> DeriveCoefficients(const ModelShape& model, const HardwareSpec& hw,
                                                const DeriveOptions& options);

// Tokens of KV cache one instance of TP degree t holds: t devices' memory at
// `memory_utilization` (serve's --gpu-memory-utilization) less the weights;
// activations are not counted. <= 0 when the weights do not fit.
int64_t DerivedKvTokens(const ModelShape& model, const HardwareSpec& hw, int tensor_parallel_size,
                        double memory_utilization);

// The "calibration" object of a derived file: {"source": "derived", the
// hardware, the model's shape, the TP degree, the formula}.
std::string DerivedProvenanceJson(const ModelShape& model, const HardwareSpec& hw, const DeriveOptions& options);

}  // namespace tessera::sim
