// Quantized weights on the GPU at the 8B model's projection shapes: Dequantize (the
// upload path, raw Q4_K / Q6_K blocks to bf16) and the fused QuantGemv at decode
// batches 1 and 16, beside what the backend does today with the dequantized bf16
// weight (CublasLinear; LinearTiled in the deterministic mode), in the same run. Whether
// QuantGemv pays (fewer bytes per weight, more work per byte) is what this measures.
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda/sections.h"
#include "common/quant.h"
#include "kernels/cuda/cublas_linear.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/linear_tiled.cuh"
#include "kernels/cuda/quant_gemv.cuh"

namespace tessera::cuda_bench {
namespace {

namespace kc = kernels::cuda;

constexpr int64_t kDecodeBatches[] = {1, 16};

// "gate_up m=16 n=28672 k=4096"; m <= 0 leaves m out (a whole-weight op).
std::string Shape(const char* name, int64_t m, int64_t n, int64_t k) {
  return std::string(name) + (m > 0 ? " m=" + std::to_string(m) : "") + " n=" + std::to_string(n) +
         " k=" + std::to_string(k);
}

// `blocks` valid Q4_K / Q6_K blocks at dst: random bytes with small finite f16
// scales, a 4096-block host pattern tiled with device copies. Synchronous.
Status FillBlocks(void* dst, int64_t blocks, DType t, uint32_t seed) {
  const int64_t bb = DTypeBlockBytes(t), pattern = std::min<int64_t>(blocks, 4096);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(0.001f, 0.01f);
  std::vector<uint8_t> host(static_cast<size_t>(pattern * bb));
  for (uint8_t& b : host) b = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < pattern; ++i) {
    uint8_t* blk = host.data() + i * bb;
    const uint16_t d = F32ToF16(scale(rng)), dmin = F32ToF16(scale(rng));
    if (t == DType::kQ6_K) {
      std::memcpy(blk + offsetof(BlockQ6_K, d), &d, 2);
    } else {
      std::memcpy(blk + offsetof(BlockQ4_K, d), &d, 2);
      std::memcpy(blk + offsetof(BlockQ4_K, dmin), &dmin, 2);
    }
  }
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t done = 0; done < blocks; done += pattern) {
    const int64_t n = std::min(pattern, blocks - done);
    CUDA_BENCH_TRY(cudaMemcpy(out + done * bb, host.data(), static_cast<size_t>(n * bb), cudaMemcpyHostToDevice));
  }
  return Status::Ok();
}

struct Sets {
  std::vector<DeviceMem> raw, bf16, x, y;
};

// Rotating copies of one shape's operands: quantized blocks of t, their bf16
// dequantization, x [16, k] and y [16, n]; enough copies that the quantized
// working set exceeds L2 (the bf16 copies then do too).
StatusOr<Sets> MakeSets(Context& ctx, const Dims::Linear& sh, DType t) {
  const int64_t blocks = sh.n * sh.k / 256, raw = blocks * DTypeBlockBytes(t), mmax = kDecodeBatches[1];
  const int sets = RotatingSets(raw + 4 * mmax * (sh.k + sh.n), ctx.l2_bytes);
  Sets s;
  for (int i = 0; i < sets; ++i) {
    ASSIGN_OR_RETURN(DeviceMem r, DeviceMem::Alloc(raw));
    ASSIGN_OR_RETURN(DeviceMem b, DeviceMem::Alloc(2 * sh.n * sh.k));
    ASSIGN_OR_RETURN(DeviceMem x, DeviceMem::Alloc(4 * mmax * sh.k));
    ASSIGN_OR_RETURN(DeviceMem y, DeviceMem::Alloc(4 * mmax * sh.n));
    RETURN_IF_ERROR(FillBlocks(r.get(), blocks, t, 30 + i));
    CUDA_BENCH_TRY(kc::Dequantize(r.get(), t, sh.n * sh.k, b.get(), ElemType::kBF16, ctx.stream));
    RETURN_IF_ERROR(FillRandom(x.get(), mmax * sh.k, ElemType::kF32, 40 + i));
    s.raw.push_back(std::move(r)), s.bf16.push_back(std::move(b)), s.x.push_back(std::move(x));
    s.y.push_back(std::move(y));
  }
  CUDA_BENCH_TRY(cudaStreamSynchronize(ctx.stream));
  return s;
}

enum class Op { kDequantize, kGemv, kCublas, kTiled };

Status Measure(Context& ctx, const Dims::Linear& sh, DType t, Op op, int64_t m, const Sets& s,
               kc::CublasLinear* blas) {
  const std::string type(DTypeName(t));
  const char* names[] = {"Dequantize -> bf16", "QuantGemv", "CublasLinear bf16", "LinearTiled bf16"};
  Row row{"quant", std::string(names[static_cast<int>(op)]) + " (" + type + ")", Shape(sh.name, m, sh.n, sh.k)};
  if (ctx.OutOfTime()) {
    row.error = "skipped: time budget";
    ctx.report->Add(row);
    return Status::Ok();
  }
  const double raw = static_cast<double>(s.raw[0].bytes()), io = 4.0 * m * (sh.k + sh.n);
  row.bytes = op == Op::kDequantize ? raw + 2.0 * sh.n * sh.k : op == Op::kGemv ? raw + io : 2.0 * sh.n * sh.k + io;
  if (op != Op::kDequantize) row.flops = 2.0 * m * sh.n * sh.k;
  TimeOptions to;
  to.min_repeats = 3;
  to.budget_ms = 200;
  auto fn = [&](int v, cudaStream_t st) -> cudaError_t {
    switch (op) {
      case Op::kDequantize:
        return kc::Dequantize(s.raw[v].get(), t, sh.n * sh.k, s.bf16[v].get(), ElemType::kBF16, st);
      case Op::kGemv:
        return kc::QuantGemv(s.x[v].as<float>(), m, sh.k, s.raw[v].get(), t, sh.n, nullptr, s.y[v].as<float>(),
                             sh.n, st);
      case Op::kTiled:
        return kc::LinearTiled(s.x[v].as<float>(), m, sh.k, s.bf16[v].get(), ElemType::kBF16, sh.n, nullptr,
                               s.y[v].as<float>(), sh.n, st);
      default:
        return blas->Linear(s.x[v].as<float>(), m, sh.k, s.bf16[v].get(), ElemType::kBF16, sh.n, nullptr,
                            s.y[v].as<float>(), sh.n).ok()
                   ? cudaSuccess
                   : cudaErrorUnknown;
    }
  };
  return AddTimed(ctx, row, TimeOp(ctx.stream, static_cast<int>(s.raw.size()), fn, to));
}

}  // namespace

Status RunQuant(Context& ctx) {
  ASSIGN_OR_RETURN(std::unique_ptr<kc::CublasLinear> blas, kc::CublasLinear::Create(ctx.stream));
  for (const Dims::Linear& sh : ctx.dims.linears) {
    if (sh.k % 256 != 0) continue;
    RETURN_IF_ERROR(blas->Reserve(kDecodeBatches[1] * sh.k));
    for (DType t : {DType::kQ4_K, DType::kQ6_K}) {
      if (ctx.OutOfTime()) break;
      StatusOr<Sets> sets = MakeSets(ctx, sh, t);
      if (!sets.ok()) {  // e.g. out of memory: recorded, the section goes on
        Row row{"quant", std::string(DTypeName(t)) + " operands", Shape(sh.name, 0, sh.n, sh.k)};
        row.error = sets.status().ToString();
        ctx.report->Add(row);
        continue;
      }
      RETURN_IF_ERROR(Measure(ctx, sh, t, Op::kDequantize, 0, *sets, blas.get()));
      for (int64_t m : kDecodeBatches) {
        for (Op op : {Op::kGemv, Op::kCublas, Op::kTiled}) {
          // The bf16 baselines do not depend on the quantized type: once per shape.
          if (op != Op::kGemv && t != DType::kQ4_K) continue;
          RETURN_IF_ERROR(Measure(ctx, sh, t, op, m, *sets, blas.get()));
        }
      }
    }
    RETURN_IF_ERROR(ctx.report->WriteJson(ctx.json_path));
  }
  ctx.report->AddNote("quant: bytes = quantized (QuantGemv, Dequantize) or bf16 (CublasLinear, LinearTiled) weight "
                      "+ x + y once each (Dequantize: raw blocks read + bf16 written); the bf16 rows multiply the "
                      "weight dequantized from Q4_K, as the backend holds it after upload.");
  return ctx.report->WriteJson(ctx.json_path);
}

}  // namespace tessera::cuda_bench
