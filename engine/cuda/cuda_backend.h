// CUDA implementation of Backend (docs/architecture.md, "Engine"): cuBLAS GEMMs, kernels/cuda for the
// other ops, a bf16 paged KV cache, CUDA graphs for decode steps.
// Built by nvcc into tessera_cuda, and against the CPU emulator into
// tessera_cuda_emu (tests); both from this one source.
#pragma once

#include <memory>

#include "common/status.h"
#include "engine/backend.h"

namespace tessera {

struct CudaBackendOptions {
  int device = 0;
  // Batch-invariant kernels: LinearTiled instead of cuBLAS, the decode attention
  // kernel for every token. A sequence's logits are then bitwise the same alone,
  // batched or chunked (slower; for tests and reproducibility).
  bool deterministic = false;
  // Capture decode steps as CUDA graphs at a set of batch sizes (Model decides
  // when; the backend provides capture and replay).
  bool cuda_graphs = true;
  // Fraction of the device's total memory this process may use: weights, the
  // profiled activation peak and the KV pool together (vLLM's meaning).
  double gpu_memory_utilization = 0.9;
};

// Fails with a clear message when there is no usable device.
StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options);

}  // namespace tessera
