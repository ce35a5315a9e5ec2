// The MoE expert FFN of the CUDA backend (engine/cuda/cuda_moe.h: plan, gather,
// gate/up, SiluMul, down, combine) at decode batch 1/64/256 for Qwen3-30B-A3B's
// and Mixtral-8x7B's expert layers, bf16 experts. Bytes are the compulsory
// traffic: the weights of the experts the routing touches (once each), x, out
// and the routing; against the D2D copy ceiling that is the decode roofline.
// Rows: "grouped" (MoeGroupedLinear: the deterministic mode, and what the cuBLAS
// mode captures in decode graphs) at every batch; "cuBLAS per-expert" where the
// cuBLAS mode's eager path takes it (>= 16 rows per expert), timed as plain
// launches (it synchronises once per call, so it cannot be captured).
// Routing: token t, slot j -> expert (v * k + t * k + j) % E for variant v, so
// each variant touches other experts (the rotation defeats the L2) and a
// token's experts are distinct.
#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bench/cuda/sections.h"
#include "engine/cuda/cuda_moe.h"
#include "kernels/cuda/cublas_linear.h"

namespace tessera::cuda_bench {
namespace {

std::string S(int64_t v) { return std::to_string(v); }

struct Layer {
  DeviceMem gate, up, down;  // [E, inter, hidden], [E, inter, hidden], [E, hidden, inter] bf16
  MoeExpertWeights w;
};

StatusOr<Layer> MakeLayer(const Dims::Moe& m) {
  Layer l;
  const int64_t per = m.inter * m.hidden;
  ASSIGN_OR_RETURN(l.gate, DeviceMem::Alloc(m.experts * per * 2));
  ASSIGN_OR_RETURN(l.up, DeviceMem::Alloc(m.experts * per * 2));
  ASSIGN_OR_RETURN(l.down, DeviceMem::Alloc(m.experts * per * 2));
  RETURN_IF_ERROR(FillRandom(l.gate.get(), m.experts * per, ElemType::kBF16, 1, 0.05f));
  RETURN_IF_ERROR(FillRandom(l.up.get(), m.experts * per, ElemType::kBF16, 2, 0.05f));
  RETURN_IF_ERROR(FillRandom(l.down.get(), m.experts * per, ElemType::kBF16, 3, 0.05f));
  l.w.num_experts = m.experts;
  l.w.hidden = m.hidden;
  l.w.inter = m.inter;
  for (int64_t e = 0; e < m.experts; ++e) {
    l.w.gate.push_back({l.gate.as<char>() + e * per * 2, DType::kBF16, m.inter, m.hidden});
    l.w.up.push_back({l.up.as<char>() + e * per * 2, DType::kBF16, m.inter, m.hidden});
    l.w.down.push_back({l.down.as<char>() + e * per * 2, DType::kBF16, m.hidden, m.inter});
  }
  return l;
}

struct Routing {
  std::vector<DeviceMem> ids, weights;  // per variant
  int64_t active = 0;                   // distinct experts of variant 0
};

StatusOr<Routing> MakeRouting(const Dims::Moe& m, int64_t tokens, int variants) {
  Routing r;
  const int64_t k = m.top_k;
  for (int v = 0; v < variants; ++v) {
    std::vector<int32_t> ids(tokens * k);
    std::set<int32_t> used;
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t j = 0; j < k; ++j) {
        ids[t * k + j] = static_cast<int32_t>((v * k + t * k + j) % m.experts);
        used.insert(ids[t * k + j]);
      }
    }
    if (v == 0) r.active = static_cast<int64_t>(used.size());
    ASSIGN_OR_RETURN(DeviceMem d, DeviceMem::Alloc(tokens * k * 4));
    RETURN_IF_ERROR(Upload(d.get(), ids));
    r.ids.push_back(std::move(d));
    ASSIGN_OR_RETURN(DeviceMem w, DeviceMem::Alloc(tokens * k * 4));
    RETURN_IF_ERROR(Upload(w.get(), std::vector<float>(tokens * k, 1.0f / static_cast<float>(k))));
    r.weights.push_back(std::move(w));
  }
  return r;
}

bool Capturing(cudaStream_t s) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(s, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone;
}

Status MoeShape(Context& ctx, const Dims::Moe& m, kernels::cuda::CublasLinear* blas) {
  ASSIGN_OR_RETURN(Layer layer, MakeLayer(m));
  CudaMoe moe;
  const double expert_bytes = 3.0 * m.inter * m.hidden * 2;
  for (int64_t tokens : ctx.dims.moe_batches) {
    const int64_t n = tokens * m.top_k;
    // Enough variants to cycle through every expert at batch 1 (at most 16).
    const int variants = static_cast<int>(std::min<int64_t>(16, (m.experts + n - 1) / n));
    ASSIGN_OR_RETURN(Routing routing, MakeRouting(m, tokens, variants));
    ASSIGN_OR_RETURN(DeviceMem x, DeviceMem::Alloc(tokens * m.hidden * 4));
    ASSIGN_OR_RETURN(DeviceMem out, DeviceMem::Alloc(tokens * m.hidden * 4));
    RETURN_IF_ERROR(FillRandom(x.get(), tokens * m.hidden, ElemType::kF32, 4));
    const bool cublas_path = n >= CudaMoe::kCublasRowsPerExpert * m.experts;
    for (bool use_cublas : {false, true}) {
      if (use_cublas && !cublas_path) continue;
      const std::string shape = m.name + std::string(" E=") + S(m.experts) + " k=" + S(m.top_k) + " batch=" +
                                S(tokens) + " " + S(routing.active) + " experts";
      Row row{"moe", use_cublas ? "MoE FFN cuBLAS per-expert" : "MoE FFN grouped", shape};
      row.bytes = routing.active * expert_bytes + 2.0 * tokens * m.hidden * 4 + n * 8.0;
      row.flops = 2.0 * n * 3 * m.hidden * m.inter;
      row.extra["active_experts"] = routing.active;
      row.extra["rows"] = n;
      if (ctx.OutOfTime()) {
        row.error = "skipped: time budget";
        ctx.report->Add(row);
        continue;
      }
      Status failed;
      auto op = [&](int v, cudaStream_t s) -> cudaError_t {
        const bool capturing = Capturing(s);
        if (use_cublas && capturing) return cudaErrorStreamCaptureUnsupported;  // timed as plain launches
        const CudaMoe::Env env{s, use_cublas ? blas : nullptr, capturing};
        Status st = moe.Experts(env, x.as<float>(), tokens, routing.ids[v].as<int32_t>(),
                                routing.weights[v].as<float>(), m.top_k, layer.w, out.as<float>());
        if (st.ok()) return cudaSuccess;
        if (failed.ok()) failed = std::move(st);
        return cudaErrorUnknown;
      };
      StatusOr<Timing> t = TimeOp(ctx.stream, variants, op);
      if (!t.ok() && !failed.ok()) t = failed;
      RETURN_IF_ERROR(AddTimed(ctx, row, t));
    }
  }
  return Status::Ok();
}

}  // namespace

Status RunMoe(Context& ctx) {
  ASSIGN_OR_RETURN(std::unique_ptr<kernels::cuda::CublasLinear> blas, kernels::cuda::CublasLinear::Create(ctx.stream));
  for (const Dims::Moe& m : ctx.dims.moes) {
    if (Status s = MoeShape(ctx, m, blas.get()); !s.ok()) {
      // Out of memory for one shape is a failed row, not a dead device.
      if (cudaDeviceSynchronize() != cudaSuccess) return s;
      Row row{"moe", "MoE FFN", m.name};
      row.error = s.ToString();
      ctx.report->Add(row);
    }
  }
  ctx.report->AddNote("moe: bytes = bf16 weights of the experts the routing touches (gate, up, down, once each) + "
                      "x + out (f32) + ids/weights; FLOPs = 6 x rows x hidden x inter. 'grouped' is one launch per "
                      "GEMM for all experts (deterministic mode; the cuBLAS mode inside decode graphs); 'cuBLAS "
                      "per-expert' is the cuBLAS mode's eager path at >= 16 rows per expert (plain launches: it "
                      "synchronises once per call).");
  return Status::Ok();
}

}  // namespace tessera::cuda_bench
