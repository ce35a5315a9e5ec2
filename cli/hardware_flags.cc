#include "cli/hardware_flags.h"

#include "cli/sim_workload.h"
#include "runtime/sim/cost_model.h"

namespace tessera {

void AddHardwareFlags(CLI::App* cmd, HardwareFlags* f) {
  std::string names;
  for (const sim::HardwareSpec& h : sim::HardwareTable()) names += (names.empty() ? "" : ", ") + h.name;
  cmd->add_option("--hardware", f->name, "the device, from published figures: " + names)->group("Hardware");
  cmd->add_option("--hardware-bw-gbs", f->bw_gbs, "device memory bandwidth, GB/s (overrides --hardware's)")
      ->check(CLI::PositiveNumber)
      ->group("Hardware");
  cmd->add_option("--hardware-tflops", f->tflops, "dense BF16 peak, TFLOP/s (overrides --hardware's)")
      ->check(CLI::PositiveNumber)
      ->group("Hardware");
  cmd->add_option("--hardware-interconnect-gbs", f->interconnect_gbs,
                  "device-to-device bandwidth per direction, GB/s (tensor parallelism's all-reduce)")
      ->check(CLI::PositiveNumber)
      ->group("Hardware");
  cmd->add_option("--hardware-memory-gb", f->memory_gb, "device memory, GB (sizes the KV cache)")
      ->check(CLI::PositiveNumber)
      ->group("Hardware");
}

StatusOr<sim::HardwareSpec> ResolveHardware(const HardwareFlags& f) {
  sim::HardwareSpec hw;
  if (!f.name.empty()) {
    ASSIGN_OR_RETURN(hw, sim::FindHardware(f.name));
  } else {
    if (!(f.bw_gbs > 0) || !(f.tflops > 0)) {
      return InvalidArgument("--hardware-bw-gbs and --hardware-tflops are both needed without --hardware");
    }
    hw.name = "custom";
  }
  if (f.bw_gbs > 0) hw.memory_bw_gbs = f.bw_gbs;
  if (f.tflops > 0) hw.tflops = f.tflops;
  if (f.interconnect_gbs > 0) hw.interconnect_gbs = f.interconnect_gbs;
  if (f.memory_gb > 0) hw.memory_gb = f.memory_gb;
  return hw;
}

sim::ModelShape ModelShapeOf(const ModelConfig& c) {
  sim::ModelShape m;
  m.num_layers = c.num_layers;
  m.hidden_size = c.hidden_size;
  m.num_q_heads = c.num_q_heads;
  m.num_kv_heads = c.num_kv_heads;
  m.head_dim = c.head_dim;
  m.num_parameters = c.NumParameters();
  m.num_active_parameters = c.NumActiveParameters();
  m.kv_bytes_per_token = c.KvBytesPerToken(2);
  m.bytes_per_parameter = 2;
  return m;
}

StatusOr<std::string> DerivedCostModelJson(const ServeFlags& serve, const HardwareFlags& hardware) {
  ASSIGN_OR_RETURN(sim::HardwareSpec hw, ResolveHardware(hardware));
  ASSIGN_OR_RETURN(std::string model, ModelPathForTwin(serve));
  if (model.empty()) return InvalidArgument("--hardware: --model is needed (its config gives the shape)");
  ASSIGN_OR_RETURN(ModelConfig config, ReadModelConfig(model));
  const sim::ModelShape shape = ModelShapeOf(config);
  sim::DeriveOptions options;
  options.tensor_parallel_size = serve.tensor_parallel_size;
  ASSIGN_OR_RETURN(sim::LinearCoefficients c, sim::DeriveCoefficients(shape, hw, options));
  return sim::LinearCostModel(c).ToJson(sim::DerivedProvenanceJson(shape, hw, options));
}

}  // namespace tessera
