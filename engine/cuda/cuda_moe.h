// The CUDA backend's Mixture-of-Experts ops (Backend::MoeRoute, MoeExperts,
// MoeCountExperts, SigmoidGateAdd; engine/backend.h is the contract), kept
// apart from cuda_backend.cc. Kernels: kernels/cuda/moe_*.cu.
//
// MoeExperts = MoePlan (rows grouped by expert, on the device) -> GatherRows ->
// gate/up GEMM -> SiluMul -> down GEMM -> MoeCombine (each token's experts
// summed in slot order). The GEMMs are MoeGroupedLinear, one launch for all
// experts with no host synchronisation, so decode steps stay capturable as
// CUDA graphs; its per-row arithmetic is independent of the grouping, which is
// what the deterministic mode needs. In the cuBLAS mode, outside a capture and
// when the experts average at least kCublasRowsPerExpert rows (prefill), the
// expert offsets are copied to the host (one synchronisation per layer and
// chunk) and each active expert runs cuBLAS GEMMs on its rows instead (tensor
// cores). Long batches run in token chunks that bound the scratch.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/backend.h"
#include "engine/cuda/grow_buffer.h"
#include "kernels/cuda/cublas_linear.h"

namespace tessera {

class CudaMoe {
 public:
  static constexpr int64_t kCublasRowsPerExpert = 16;

  // How the owning backend runs: its stream, cuBLAS (null in the deterministic
  // mode) and whether a graph capture is in progress.
  struct Env {
    cudaStream_t stream = nullptr;
    kernels::cuda::CublasLinear* blas = nullptr;
    bool capturing = false;
  };

  // MoeExperts runs batches in chunks whose scratch fits this budget (a
  // Mixtral layer needs ~190 KB per routed row), so the profiled peak of a long
  // prefill stays bounded.
  static constexpr int64_t kDefaultScratchBudget = int64_t{256} << 20;

  explicit CudaMoe(int64_t scratch_budget_bytes = kDefaultScratchBudget) : scratch_budget_(scratch_budget_bytes) {}
  ~CudaMoe();
  CudaMoe(const CudaMoe&) = delete;
  CudaMoe& operator=(const CudaMoe&) = delete;

  Status Route(const Env& env, const float* logits, int64_t tokens, int64_t num_experts, int64_t top_k,
               bool renormalize, int32_t* topk_ids, float* topk_weights);
  // The first call for a layer uploads its expert pointer table (so it must
  // not be inside a capture); scratch grows to the largest chunk seen, and
  // growing inside a capture fails (run each shape eagerly first, as Model
  // does). The cuBLAS path synchronises the stream once per chunk (offsets).
  Status Experts(const Env& env, const float* x, int64_t tokens, const int32_t* topk_ids,
                 const float* topk_weights, int64_t top_k, const MoeExpertWeights& w, float* out);
  Status CountExperts(const Env& env, const int32_t* topk_ids, int64_t n, int64_t num_experts, int64_t* counts);
  Status SigmoidGateAdd(const Env& env, float* out, const float* shared, const float* gate_logits, int64_t rows,
                        int64_t dim);

 private:
  // Device copy of one layer's expert pointers: [gate_0, up_0, gate_1, up_1, ...]
  // then [down_0, down_1, ...]. Keyed by gate[0].data; rebuilt if the views change.
  struct Table {
    std::vector<const void*> host;
    int64_t hidden = 0, inter = 0;
    DType dtype = DType::kF32;
    void* device = nullptr;
    bool aligned = false;  // every weight 16-byte aligned
  };
  StatusOr<const Table*> GetTable(const Env& env, const MoeExpertWeights& w);
  // One chunk of tokens; the scratch already holds it.
  Status ExpertsChunk(const Env& env, const Table* table, const float* x, int64_t tokens, const int32_t* topk_ids,
                      const float* topk_weights, int64_t top_k, const MoeExpertWeights& w, float* out);

  const int64_t scratch_budget_;

  std::unordered_map<const void*, Table> tables_;
  std::vector<void*> retired_tables_;  // replaced tables (a graph may hold them)
  GrowBuffer scratch_;
};

}  // namespace tessera
