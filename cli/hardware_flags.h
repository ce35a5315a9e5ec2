// `--hardware SPEC` and its overrides, shared by `tessera calibrate` (a
// derived cost-model file) and `tessera plan` (a cost model per TP degree):
// runtime/sim/hardware.h does the arithmetic; this reads the flags and the
// model's shape from its config.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "cli/serve_flags.h"
#include "common/status.h"
#include "engine/model_config.h"
#include "runtime/sim/hardware.h"

namespace tessera {

struct HardwareFlags {
  std::string name;  // a table entry, or "" with --hardware-bw-gbs and --hardware-tflops
  double bw_gbs = 0, tflops = 0, interconnect_gbs = 0, memory_gb = 0;  // 0: the table's
  bool given() const { return !name.empty() || bw_gbs > 0 || tflops > 0; }
};

// --hardware, --hardware-bw-gbs, --hardware-tflops, --hardware-interconnect-gbs,
// --hardware-memory-gb (group "Hardware").
void AddHardwareFlags(CLI::App* cmd, HardwareFlags* f);

// The table's entry with the overrides applied; without --hardware both
// --hardware-bw-gbs and --hardware-tflops are needed ("custom").
StatusOr<sim::HardwareSpec> ResolveHardware(const HardwareFlags& f);

// The derivation's view of a model: BF16 weights, a BF16 KV cache (a GPU's).
sim::ModelShape ModelShapeOf(const ModelConfig& config);

// The cost-model file (cost_model.h's format, "calibration.source": "derived")
// for --model at serve's --tensor-parallel-size on the hardware.
StatusOr<std::string> DerivedCostModelJson(const ServeFlags& serve, const HardwareFlags& hardware);

}  // namespace tessera
