#include "runtime/sim/hardware.h"

#include <nlohmann/json.hpp>

namespace tessera::sim {

const std::vector<HardwareSpec>& HardwareTable() {
  // NVIDIA's datasheets: dense BF16 (without sparsity); NVLink per direction
  // (half the quoted bidirectional figure); the L40S has no NVLink: PCIe 4.0 x16.
  static const std::vector<HardwareSpec> table = {
      {"h100-sxm", 3350, 989, 450, 80},
      {"h200", 4800, 989, 450, 141},
      {"a100-80g", 2039, 312, 300, 80},
      {"l40s", 864, 362, 32, 48},
  };
  return table;
}

StatusOr<HardwareSpec> FindHardware(const std::string& name) {
  std::string names;
  for (const HardwareSpec& h : HardwareTable()) {
    if (h.name == name) return h;
    names += (names.empty() ? "" : ", ") + h.name;
  }
  return InvalidArgument("--hardware: unknown '" + name + "' (built in: " + names +
                         "; or give --hardware-bw-gbs and --hardware-tflops)");
}

namespace {

Status CheckInputs(const ModelShape& m, const HardwareSpec& hw, int t) {
  if (m.num_layers <= 0 || m.hidden_size <= 0 || m.num_q_heads <= 0 || m.num_kv_heads <= 0 || m.head_dim <= 0 ||
      m.num_parameters <= 0 || m.num_active_parameters <= 0 || m.kv_bytes_per_token <= 0 ||
      !(m.bytes_per_parameter > 0)) {
    return InvalidArgument("derived cost model: the model's shape has a non-positive figure");
  }
  if (!(hw.memory_bw_gbs > 0) || !(hw.tflops > 0)) {
    return InvalidArgument("derived cost model: hardware '" + hw.name + "' needs a memory bandwidth and FLOP/s > 0");
  }
  if (t < 1) return InvalidArgument("derived cost model: tensor parallel size must be >= 1");
  if (t > 1 && !(hw.interconnect_gbs > 0)) {
    return InvalidArgument("derived cost model: tensor parallelism needs the interconnect bandwidth of '" + hw.name +
                           "' (--hardware-interconnect-gbs)");
  }
  if (m.num_q_heads % t != 0 || (m.num_kv_heads % t != 0 && t % m.num_kv_heads != 0)) {
    return InvalidArgument("derived cost model: " + std::to_string(m.num_q_heads) + " attention heads / " +
                           std::to_string(m.num_kv_heads) + " KV heads do not split over " + std::to_string(t) +
                           " ranks");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<LinearCoefficients> DeriveCoefficients(const ModelShape& m, const HardwareSpec& hw,
                                                const DeriveOptions& o) {
  const int t = o.tensor_parallel_size;
  RETURN_IF_ERROR(CheckInputs(m, hw, t));
  const double bw = hw.memory_bw_gbs * 1e9;  // bytes/s
  const double flops = hw.tflops * 1e12;     // FLOP/s
  const double td = static_cast<double>(t);
  // All-reduce: two per layer (after attention, after the MLP), a ring moving
  // 2 (t-1)/t of the BF16 hidden state per token over the link.
  const double allreduce_s_per_token =
      t > 1 ? 2.0 * static_cast<double>(m.num_layers) * 2.0 * (td - 1) / td * static_cast<double>(m.hidden_size) * 2.0 /
                  (hw.interconnect_gbs * 1e9)
            : 0.0;
  const double allreduce_latency_s =
      t > 1 ? 2.0 * static_cast<double>(m.num_layers) * o.allreduce_latency_us * 1e-6 : 0.0;
  // KV heads on a rank: an even split, or one replicated head when t exceeds them.
  const double kv_heads_per_rank =
      m.num_kv_heads % t == 0 ? static_cast<double>(m.num_kv_heads / t) : 1.0;
  const double kv_bytes_per_rank =
      static_cast<double>(m.kv_bytes_per_token) * kv_heads_per_rank / static_cast<double>(m.num_kv_heads);
  const double attention_flops_per_pair =
      4.0 * static_cast<double>(m.num_layers * m.num_q_heads * m.head_dim) / td;
  LinearCoefficients c;
  c.base_ms = 1e3 * (static_cast<double>(m.num_parameters) * m.bytes_per_parameter / td / bw + allreduce_latency_s);
  c.per_prefill_token_ms =
      1e3 * (2.0 * static_cast<double>(m.num_active_parameters) / td / flops + allreduce_s_per_token);
  c.per_decode_token_ms = c.per_prefill_token_ms;
  c.per_prefill_attention_ms = 1e3 * attention_flops_per_pair / flops;
  c.per_decode_context_ms = 1e3 * (kv_bytes_per_rank / bw + attention_flops_per_pair / flops);
  return c;
}

int64_t DerivedKvTokens(const ModelShape& m, const HardwareSpec& hw, int t, double memory_utilization) {
  if (m.kv_bytes_per_token <= 0 || t < 1) return 0;
  const double free_bytes = hw.memory_gb * 1e9 * t * memory_utilization -
                            static_cast<double>(m.num_parameters) * m.bytes_per_parameter;
  if (free_bytes <= 0) return 0;
  return static_cast<int64_t>(free_bytes / static_cast<double>(m.kv_bytes_per_token));
}

std::string DerivedProvenanceJson(const ModelShape& m, const HardwareSpec& hw, const DeriveOptions& o) {
  const nlohmann::ordered_json j = {
      {"source", "derived"},
      {"note", "not measured: a roofline estimate from published hardware figures (runtime/sim/hardware.h); "
               "`tessera calibrate` on the device measures it"},
      {"hardware",
       {{"name", hw.name},
        {"memory_bw_gbs", hw.memory_bw_gbs},
        {"tflops", hw.tflops},
        {"interconnect_gbs", hw.interconnect_gbs},
        {"memory_gb", hw.memory_gb}}},
      {"tensor_parallel_size", o.tensor_parallel_size},
      {"allreduce_latency_us", o.allreduce_latency_us},
      {"model",
       {{"num_layers", m.num_layers},
        {"hidden_size", m.hidden_size},
        {"num_attention_heads", m.num_q_heads},
        {"num_key_value_heads", m.num_kv_heads},
        {"head_dim", m.head_dim},
        {"num_parameters", m.num_parameters},
        {"num_active_parameters", m.num_active_parameters},
        {"kv_bytes_per_token", m.kv_bytes_per_token},
        {"bytes_per_parameter", m.bytes_per_parameter}}},
      {"formula",
       "step = weight bytes/t/BW + 2L all-reduce latencies + (prefill + decode tokens) * (2 active params/t/FLOPS + "
       "all-reduce bytes/link BW) + attended pairs * 4L*heads*head_dim/t/FLOPS + decode context * KV bytes/t/BW"}};
  return j.dump();
}

}  // namespace tessera::sim
