#include "engine/cuda/cuda_moe.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/compat.cuh"
#include "kernels/cuda/gather_rows.cuh"
#include "kernels/cuda/moe_combine.cuh"
#include "kernels/cuda/moe_count.cuh"
#include "kernels/cuda/moe_grouped_linear.cuh"
#include "kernels/cuda/moe_plan.cuh"
#include "kernels/cuda/moe_route.cuh"
#include "kernels/cuda/sigmoid_gate_add.cuh"
#include "kernels/cuda/silu_mul.cuh"

namespace tessera {
namespace {

namespace kc = kernels::cuda;

Status Cuda(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Internal("cuda backend: " + what + ": " + cudaGetErrorString(e));
}

kc::ElemType ToElem(DType t) {
  switch (t) {
    case DType::kF16: return kc::ElemType::kF16;
    case DType::kBF16: return kc::ElemType::kBF16;
    default: return kc::ElemType::kF32;
  }
}

int64_t Align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

std::string Shape(const WeightView& v) { return "[" + std::to_string(v.rows) + ", " + std::to_string(v.cols) + "]"; }

// Every view present, one float dtype, gate/up [inter, hidden], down [hidden, inter].
Status Validate(const MoeExpertWeights& w) {
  const int64_t e = w.num_experts;
  if (e < 1 || e > kc::kMoeMaxExperts) {
    return InvalidArgument("cuda backend: MoE with " + std::to_string(e) + " experts (supported: 1 to " +
                           std::to_string(kc::kMoeMaxExperts) + ")");
  }
  if (static_cast<int64_t>(w.gate.size()) != e || static_cast<int64_t>(w.up.size()) != e ||
      static_cast<int64_t>(w.down.size()) != e) {
    return InvalidArgument("cuda backend: MoE expert weights: expected " + std::to_string(e) +
                           " gate/up/down views each");
  }
  const DType dtype = w.gate[0].dtype;
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    return InvalidArgument("cuda backend: MoE expert dtype " + std::string(DTypeName(dtype)) +
                           " (uploaded weights are f32, f16 or bf16)");
  }
  for (int64_t i = 0; i < e; ++i) {
    const WeightView* views[3] = {&w.gate[i], &w.up[i], &w.down[i]};
    const char* names[3] = {"gate", "up", "down"};
    for (int v = 0; v < 3; ++v) {
      const WeightView& x = *views[v];
      const bool down = v == 2;
      const int64_t rows = down ? w.hidden : w.inter, cols = down ? w.inter : w.hidden;
      if (x.empty() || x.dtype != dtype || x.rows != rows || x.cols != cols) {
        return InvalidArgument("cuda backend: MoE expert " + std::to_string(i) + " " + names[v] + " weight " +
                               Shape(x) + " " + std::string(DTypeName(x.dtype)) + (x.empty() ? " (missing)" : "") +
                               ", expected [" + std::to_string(rows) + ", " + std::to_string(cols) + "] " +
                               std::string(DTypeName(dtype)));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

CudaMoe::~CudaMoe() {
  for (auto& [key, t] : tables_) cudaFree(t.device);
  for (void* p : retired_tables_) cudaFree(p);
}

Status CudaMoe::Route(const Env& env, const float* logits, int64_t tokens, int64_t num_experts, int64_t top_k,
                      bool renormalize, int32_t* topk_ids, float* topk_weights) {
  if (tokens <= 0) return Status::Ok();
  if (num_experts < 1 || num_experts > kc::kMoeMaxExperts || top_k < 1 || top_k > num_experts) {
    return InvalidArgument("cuda backend: MoeRoute with " + std::to_string(num_experts) + " experts, top_k " +
                           std::to_string(top_k) + " (need 1 <= top_k <= experts <= " +
                           std::to_string(kc::kMoeMaxExperts) + ")");
  }
  return Cuda(kc::MoeTopKSoftmax(logits, tokens, num_experts, top_k, renormalize, topk_ids, topk_weights, env.stream),
              "MoeTopKSoftmax");
}

StatusOr<const CudaMoe::Table*> CudaMoe::GetTable(const Env& env, const MoeExpertWeights& w) {
  const int64_t e = w.num_experts;
  std::vector<const void*> host;
  if (e >= 1 && static_cast<int64_t>(w.gate.size()) == e && static_cast<int64_t>(w.up.size()) == e &&
      static_cast<int64_t>(w.down.size()) == e) {
    host.reserve(static_cast<size_t>(3 * e));
    for (int64_t i = 0; i < e; ++i) {
      host.push_back(w.gate[i].data);
      host.push_back(w.up[i].data);
    }
    for (int64_t i = 0; i < e; ++i) host.push_back(w.down[i].data);
    auto it = tables_.find(host[0]);
    if (it != tables_.end() && it->second.host == host && it->second.hidden == w.hidden &&
        it->second.inter == w.inter && it->second.dtype == w.gate[0].dtype) {
      return &it->second;
    }
  }
  RETURN_IF_ERROR(Validate(w));
  if (env.capturing) {
    return FailedPrecondition("cuda backend: MoE expert table built during graph capture (run the layer once first)");
  }
  Table t;
  t.host = std::move(host);
  t.hidden = w.hidden;
  t.inter = w.inter;
  t.dtype = w.gate[0].dtype;
  t.aligned = std::all_of(t.host.begin(), t.host.end(), Aligned16);
  const int64_t bytes = static_cast<int64_t>(t.host.size() * sizeof(void*));
  RETURN_IF_ERROR(Cuda(cudaMalloc(&t.device, static_cast<size_t>(bytes)), "cudaMalloc of an MoE expert table"));
  auto [it, inserted] = tables_.try_emplace(t.host[0]);
  if (!inserted) retired_tables_.push_back(it->second.device);
  it->second = std::move(t);
  // From pageable memory: cudaMemcpyAsync has copied it when it returns.
  RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(it->second.device, it->second.host.data(), static_cast<size_t>(bytes),
                                       cudaMemcpyHostToDevice, env.stream),
                       "MoE expert table upload"));
  return &it->second;
}

namespace {

// Scratch of one chunk of `rows` (token, slot) rows: plan, pair_row, row_token,
// x (then y) permuted, gate|up, act; each 256-byte aligned.
struct ScratchLayout {
  int64_t plan, idx, xy, gu, act;
  ScratchLayout(int64_t rows, int64_t experts, int64_t hidden, int64_t inter)
      : plan(Align256(kc::MoePlanInts(experts) * 4)), idx(Align256(rows * 4)), xy(Align256(rows * hidden * 4)),
        gu(Align256(rows * 2 * inter * 4)), act(Align256(rows * inter * 4)) {}
  int64_t total() const { return plan + 2 * idx + xy + gu + act; }
};

}  // namespace

Status CudaMoe::Experts(const Env& env, const float* x, int64_t tokens, const int32_t* topk_ids,
                        const float* topk_weights, int64_t top_k, const MoeExpertWeights& w, float* out) {
  if (tokens <= 0) return Status::Ok();
  if (top_k < 1 || top_k > w.num_experts) {
    return InvalidArgument("cuda backend: MoeExperts with top_k " + std::to_string(top_k) + " of " +
                           std::to_string(w.num_experts) + " experts");
  }
  ASSIGN_OR_RETURN(const Table* table, GetTable(env, w));
  // Tokens per chunk: the scratch budget's worth, at least one. Chunks are
  // independent calls; a row's arithmetic does not depend on its chunk.
  const int64_t per_token = ScratchLayout(top_k, w.num_experts, w.hidden, w.inter).total();
  const int64_t chunk = std::clamp<int64_t>(scratch_budget_ / per_token, 1, tokens);
  const int64_t total = ScratchLayout(chunk * top_k, w.num_experts, w.hidden, w.inter).total();
  if (total > scratch_.bytes && env.capturing) {
    return FailedPrecondition("cuda backend: MoE workspace would grow during graph capture");
  }
  RETURN_IF_ERROR(Cuda(scratch_.Ensure(total), "MoE workspace of " + std::to_string(total) + " bytes"));
  for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
    const int64_t c = std::min(chunk, tokens - t0);
    RETURN_IF_ERROR(ExpertsChunk(env, table, x + t0 * w.hidden, c, topk_ids + t0 * top_k,
                                 topk_weights + t0 * top_k, top_k, w, out + t0 * w.hidden));
  }
  return Status::Ok();
}

Status CudaMoe::ExpertsChunk(const Env& env, const Table* table, const float* x, int64_t tokens,
                             const int32_t* topk_ids, const float* topk_weights, int64_t top_k,
                             const MoeExpertWeights& w, float* out) {
  const int64_t n = tokens * top_k, experts = w.num_experts, hidden = w.hidden, inter = w.inter;
  const ScratchLayout l(n, experts, hidden, inter);
  char* p = static_cast<char*>(scratch_.p);
  auto* plan = reinterpret_cast<int32_t*>(p);
  auto* pair_row = reinterpret_cast<int32_t*>(p += l.plan);
  auto* row_token = reinterpret_cast<int32_t*>(p += l.idx);
  auto* xy = reinterpret_cast<float*>(p += l.idx);
  auto* gate_up = reinterpret_cast<float*>(p += l.xy);
  auto* act = reinterpret_cast<float*>(p += l.gu);

  RETURN_IF_ERROR(Cuda(kc::MoePlan(topk_ids, n, top_k, experts, kc::kMoeTileRows, plan, pair_row, row_token,
                                   env.stream),
                       "MoePlan"));
  RETURN_IF_ERROR(Cuda(kc::GatherRows(x, hidden, row_token, n, xy, env.stream), "MoE GatherRows"));
  const kc::ElemType elem = ToElem(table->dtype);
  const bool cublas = env.blas != nullptr && !env.capturing && n >= kCublasRowsPerExpert * experts;
  // One grouped launch over every expert: `x` [n, k] rows grouped by expert, the
  // weight table from entry `first` on, `parts` matrices of n_part rows each.
  auto grouped = [&](const float* x, int64_t k, int64_t first, int64_t parts, int64_t n_part, float* y) {
    kc::MoeGroupedLinearArgs a;
    a.x = x;
    a.k = k;
    a.weights = static_cast<const void* const*>(table->device) + first;
    a.w_type = elem;
    a.parts = parts;
    a.n_part = n_part;
    a.num_experts = experts;
    a.plan = plan;
    a.max_tiles = kc::MoeMaxTiles(n, experts, kc::kMoeTileRows);
    a.vector_loads = table->aligned && k % 8 == 0;
    a.y = y;
    return a;
  };
  std::vector<int32_t> offset;
  if (cublas) {
    offset.resize(static_cast<size_t>(experts + 1));
    RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(offset.data(), plan, static_cast<size_t>(experts + 1) * 4,
                                         cudaMemcpyDeviceToHost, env.stream),
                         "MoE expert offsets"));
    RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(env.stream), "MoE expert offsets (synchronize)"));
    for (int64_t e = 0; e < experts; ++e) {
      const int64_t r0 = offset[e], rows = offset[e + 1] - r0;
      if (rows <= 0) continue;
      RETURN_IF_ERROR(env.blas->Linear(xy + r0 * hidden, rows, hidden, w.gate[e].data, elem, inter, nullptr,
                                       gate_up + r0 * 2 * inter, 2 * inter));
      RETURN_IF_ERROR(env.blas->Linear(xy + r0 * hidden, rows, hidden, w.up[e].data, elem, inter, nullptr,
                                       gate_up + r0 * 2 * inter + inter, 2 * inter));
    }
  } else {
    RETURN_IF_ERROR(Cuda(kc::MoeGroupedLinear(grouped(xy, hidden, 0, 2, inter, gate_up), env.stream),
                         "MoeGroupedLinear (gate, up)"));
  }
  RETURN_IF_ERROR(Cuda(kc::SiluMul(gate_up, n, inter, act, env.stream), "MoE SiluMul"));
  if (cublas) {
    for (int64_t e = 0; e < experts; ++e) {
      const int64_t r0 = offset[e], rows = offset[e + 1] - r0;
      if (rows <= 0) continue;
      RETURN_IF_ERROR(env.blas->Linear(act + r0 * inter, rows, inter, w.down[e].data, elem, hidden, nullptr,
                                       xy + r0 * hidden, hidden));
    }
  } else {
    RETURN_IF_ERROR(Cuda(kc::MoeGroupedLinear(grouped(act, inter, 2 * experts, 1, hidden, xy), env.stream),
                         "MoeGroupedLinear (down)"));
  }
  return Cuda(kc::MoeCombine(xy, hidden, pair_row, topk_weights, tokens, top_k, out, env.stream), "MoeCombine");
}

Status CudaMoe::CountExperts(const Env& env, const int32_t* topk_ids, int64_t n, int64_t num_experts,
                             int64_t* counts) {
  return Cuda(kc::MoeCountExperts(topk_ids, n, num_experts, counts, env.stream), "MoeCountExperts");
}

Status CudaMoe::SigmoidGateAdd(const Env& env, float* out, const float* shared, const float* gate_logits,
                               int64_t rows, int64_t dim) {
  return Cuda(kc::SigmoidGateAdd(out, shared, gate_logits, rows, dim, env.stream), "SigmoidGateAdd");
}

}  // namespace tessera
