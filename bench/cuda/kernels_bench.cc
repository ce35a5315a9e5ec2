// Elementwise and row kernels at serving sizes (Llama-3-8B dimensions), as bytes
// moved per call over time, against the D2D copy ceiling.
#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "bench/cuda/sections.h"
#include "kernels/cuda/block_copy.cuh"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gather_rows.cuh"
#include "kernels/cuda/head_rms_norm.cuh"
#include "kernels/cuda/kv_write.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/sampling.cuh"
#include "kernels/cuda/silu_mul.cuh"

namespace tessera::cuda_bench {
namespace {

namespace k = kernels::cuda;

// Llama-3-8B.
constexpr int64_t kHidden = 4096, kInter = 14336, kQHeads = 32, kKvHeads = 8, kHeadDim = 128, kVocab = 128256;
constexpr int64_t kQkv = (kQHeads + 2 * kKvHeads) * kHeadDim;  // fused q|k|v row
constexpr int64_t kMaxPos = 8192;
constexpr float kEps = 1e-5f;

struct Buf {
  int64_t count;
  ElemType type;
};
using Set = std::vector<DeviceMem>;
using KernelFn = std::function<cudaError_t(const Set& bufs, cudaStream_t stream)>;

// Times fn over rotating sets of `per_set` buffers (random-filled); one row.
Status Bench(Context& ctx, Row row, const std::vector<Buf>& per_set, const KernelFn& fn) {
  if (ctx.OutOfTime()) {
    row.error = "skipped: time budget";
    ctx.report->Add(row);
    return Status::Ok();
  }
  int64_t set_bytes = 0;
  for (const Buf& b : per_set) set_bytes += b.count * k::ElemSize(b.type);
  const int sets = RotatingSets(set_bytes, ctx.l2_bytes);
  std::vector<Set> bufs(sets);
  auto measure = [&]() -> StatusOr<Timing> {
    for (int s = 0; s < sets; ++s) {
      for (size_t i = 0; i < per_set.size(); ++i) {
        ASSIGN_OR_RETURN(DeviceMem m, DeviceMem::Alloc(per_set[i].count * k::ElemSize(per_set[i].type)));
        RETURN_IF_ERROR(FillRandom(m.get(), per_set[i].count, per_set[i].type, 100 * s + i));
        bufs[s].push_back(std::move(m));
      }
    }
    return TimeOp(ctx.stream, sets, [&](int v, cudaStream_t st) { return fn(bufs[v], st); });
  };
  row.extra["rotating_sets"] = sets;
  return AddTimed(ctx, row, measure());
}

std::string Rows(int64_t t, const std::string& rest) { return "tokens=" + std::to_string(t) + " " + rest; }

StatusOr<DeviceMem> UploadInts(const std::vector<int32_t>& v) {
  ASSIGN_OR_RETURN(DeviceMem m, DeviceMem::Alloc(static_cast<int64_t>(v.size() * 4)));
  RETURN_IF_ERROR(Upload(m.get(), v));
  return m;
}

Status TokenOps(Context& ctx, int64_t t, const DeviceMem& w, const DeviceMem& table, const DeviceMem& cos_sin) {
  const double f = 4;  // bytes per f32
  Row r{"kernel", "RmsNorm", Rows(t, "dim=4096")};
  r.bytes = f * (2.0 * t * kHidden + kHidden);
  RETURN_IF_ERROR(Bench(ctx, r, {{t * kHidden, ElemType::kF32}, {t * kHidden, ElemType::kF32}},
                        [&](const Set& b, cudaStream_t s) {
                          return k::RmsNorm(b[0].as<float>(), w.as<float>(), t, kHidden, kEps, b[1].as<float>(), s);
                        }));
  r = Row{"kernel", "AddRmsNorm", Rows(t, "dim=4096")};
  r.bytes = f * (4.0 * t * kHidden + kHidden);
  RETURN_IF_ERROR(Bench(ctx, r,
                        {{t * kHidden, ElemType::kF32}, {t * kHidden, ElemType::kF32}, {t * kHidden, ElemType::kF32}},
                        [&](const Set& b, cudaStream_t s) {
                          return k::AddRmsNorm(b[0].as<float>(), b[1].as<float>(), w.as<float>(), t, kHidden, kEps,
                                               b[2].as<float>(), s);
                        }));
  r = Row{"kernel", "HeadRmsNorm", Rows(t, "q heads=32x128 in qkv rows")};
  r.bytes = f * (2.0 * t * kQHeads * kHeadDim + kHeadDim);
  RETURN_IF_ERROR(Bench(ctx, r, {{t * kQkv, ElemType::kF32}}, [&](const Set& b, cudaStream_t s) {
    return k::HeadRmsNorm(b[0].as<float>(), t, kQHeads, kHeadDim, kQkv, w.as<float>(), kEps, s);
  }));
  r = Row{"kernel", "SiluMul", Rows(t, "inter=14336")};
  r.bytes = f * 3.0 * t * kInter;
  RETURN_IF_ERROR(Bench(ctx, r, {{t * 2 * kInter, ElemType::kF32}, {t * kInter, ElemType::kF32}},
                        [&](const Set& b, cudaStream_t s) {
                          return k::SiluMul(b[0].as<float>(), t, kInter, b[1].as<float>(), s);
                        }));

  std::mt19937 rng(static_cast<uint32_t>(t));
  std::vector<int32_t> pos(t), ids(t);
  for (auto& p : pos) p = static_cast<int32_t>(rng() % kMaxPos);
  for (auto& i : ids) i = static_cast<int32_t>(rng() % kVocab);
  ASSIGN_OR_RETURN(DeviceMem d_pos, UploadInts(pos));
  ASSIGN_OR_RETURN(DeviceMem d_ids, UploadInts(ids));
  r = Row{"kernel", "Rope", Rows(t, "q+k heads=40x128, rot=128")};
  r.bytes = f * (2.0 * t * (kQHeads + kKvHeads) * kHeadDim + t * kHeadDim) + 4.0 * t;
  RETURN_IF_ERROR(Bench(ctx, r, {{t * kQkv, ElemType::kF32}}, [&](const Set& b, cudaStream_t s) {
    return k::Rope(b[0].as<float>(), t, kQHeads + kKvHeads, kHeadDim, kQkv, kHeadDim, d_pos.as<int32_t>(),
                   cos_sin.as<float>(), s);
  }));
  r = Row{"kernel", "Embedding", Rows(t, "bf16 table 128256x4096")};
  r.bytes = 2.0 * t * kHidden + f * t * kHidden + 4.0 * t;
  RETURN_IF_ERROR(Bench(ctx, r, {{t * kHidden, ElemType::kF32}}, [&](const Set& b, cudaStream_t s) {
    return k::Embedding(table.get(), ElemType::kBF16, kHidden, d_ids.as<int32_t>(), t, b[0].as<float>(), s);
  }));

  // WriteKv: distinct random slots in a cache of max(4t, 64k) slots, bf16.
  const int64_t slots = std::max<int64_t>(4 * t, 65536);
  std::vector<int64_t> perm(slots);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  perm.resize(t);
  ASSIGN_OR_RETURN(DeviceMem d_slots, DeviceMem::Alloc(t * 8));
  RETURN_IF_ERROR(Upload(d_slots.get(), perm));
  const int64_t kv_row = kKvHeads * kHeadDim;
  ASSIGN_OR_RETURN(DeviceMem kc, DeviceMem::Alloc(slots * kv_row * 2));
  ASSIGN_OR_RETURN(DeviceMem vc, DeviceMem::Alloc(slots * kv_row * 2));
  r = Row{"kernel", "WriteKv", Rows(t, "kv=8x128 f32 -> bf16 cache")};
  r.bytes = 2.0 * t * kv_row * (4 + 2) + 8.0 * t;
  RETURN_IF_ERROR(Bench(ctx, r, {{t * kQkv, ElemType::kF32}}, [&](const Set& b, cudaStream_t s) {
    const float* qkv = b[0].as<float>();
    return k::WriteKv(qkv + kQHeads * kHeadDim, kQkv, qkv + (kQHeads + kKvHeads) * kHeadDim, kQkv, t, kKvHeads,
                      kHeadDim, d_slots.as<int64_t>(), kc.get(), vc.get(), ElemType::kBF16, s);
  }));

  // GatherRows: the rows whose logits are wanted (one per sequence).
  const int64_t n = std::min<int64_t>(t, 256);
  std::vector<int32_t> rows(n);
  for (int64_t i = 0; i < n; ++i) rows[i] = static_cast<int32_t>(i * (t / n));
  ASSIGN_OR_RETURN(DeviceMem d_rows, UploadInts(rows));
  r = Row{"kernel", "GatherRows", Rows(t, "n=" + std::to_string(n) + " cols=4096")};
  r.bytes = f * 2.0 * n * kHidden + 4.0 * n;
  RETURN_IF_ERROR(Bench(ctx, r, {{t * kHidden, ElemType::kF32}, {n * kHidden, ElemType::kF32}},
                        [&](const Set& b, cudaStream_t s) {
                          return k::GatherRows(b[0].as<float>(), kHidden, d_rows.as<int32_t>(), n, b[1].as<float>(), s);
                        }));
  r = Row{"kernel", "ConvertFromF32", Rows(t, "cols=14336 -> bf16")};
  r.bytes = 6.0 * t * kInter;
  RETURN_IF_ERROR(Bench(ctx, r, {{t * kInter, ElemType::kF32}, {t * kInter, ElemType::kBF16}},
                        [&](const Set& b, cudaStream_t s) {
                          return k::ConvertFromF32(b[0].as<float>(), kInter, t, kInter, b[1].get(), ElemType::kBF16,
                                                   kInter, s);
                        }));
  r = Row{"kernel", "AddBias", Rows(t, "cols=6144")};
  r.bytes = f * (2.0 * t * kQkv + kQkv);
  return Bench(ctx, r, {{t * kQkv, ElemType::kF32}}, [&](const Set& b, cudaStream_t s) {
    return k::AddBias(b[0].as<float>(), kQkv, t, kQkv, w.as<float>(), s);
  });
}

// CopyBlocks as a swap-in of 64 blocks in every layer and side of the 8B model.
Status CopyBlocksOp(Context& ctx) {
  constexpr int64_t kLayers = 32, kBlocks = 512, kPairs = 64;
  const int64_t block_bytes = 16 * kKvHeads * kHeadDim * 2;  // 16 tokens, bf16
  std::vector<DeviceMem> layers;
  std::vector<void*> bases;
  for (int64_t i = 0; i < 2 * kLayers; ++i) {
    ASSIGN_OR_RETURN(DeviceMem m, DeviceMem::Alloc(kBlocks * block_bytes));
    RETURN_IF_ERROR(FillRandom(m.get(), kBlocks * block_bytes / 2, ElemType::kBF16, 500 + i));
    bases.push_back(m.get());
    layers.push_back(std::move(m));
  }
  std::vector<int64_t> pairs;
  for (int64_t p = 0; p < kPairs; ++p) {
    pairs.push_back(3 * p % (kBlocks / 2));  // src in the lower half, dst in the upper: no chains
    pairs.push_back(kBlocks / 2 + (5 * p) % (kBlocks / 2));
  }
  ASSIGN_OR_RETURN(DeviceMem d_bases, DeviceMem::Alloc(static_cast<int64_t>(bases.size() * sizeof(void*))));
  RETURN_IF_ERROR(Upload(d_bases.get(), bases));
  ASSIGN_OR_RETURN(DeviceMem d_pairs, DeviceMem::Alloc(static_cast<int64_t>(pairs.size() * 8)));
  RETURN_IF_ERROR(Upload(d_pairs.get(), pairs));
  Row r{"kernel", "CopyBlocks", "64 layer-sides x 64 blocks x 32 KiB"};
  r.bytes = 2.0 * 2 * kLayers * kPairs * block_bytes;
  return AddTimed(ctx, r, TimeOp(ctx.stream, 1, [&](int, cudaStream_t s) {
                    return k::CopyBlocks(d_bases.as<void* const>(), 2 * kLayers, block_bytes,
                                         d_pairs.as<const int64_t>(), kPairs, s);
                  }));
}

// Logits processing on a decode step's logits [rows, vocab]: bytes = the logits
// read once (the fewest any of them can move), so the fraction of the copy
// ceiling also says how many passes over the logits an op effectively makes.
Status SamplingOps(Context& ctx, int64_t rows) {
  const double logit_bytes = 4.0 * rows * kVocab;
  ASSIGN_OR_RETURN(DeviceMem out, DeviceMem::Alloc(rows * 8));
  Row r{"kernel", "ArgmaxRows", "rows=" + std::to_string(rows) + " vocab=128256"};
  r.bytes = logit_bytes + 4.0 * rows;
  RETURN_IF_ERROR(Bench(ctx, r, {{rows * kVocab, ElemType::kF32}}, [&](const Set& b, cudaStream_t s) {
    return k::ArgmaxRows(b[0].as<float>(), rows, kVocab, out.as<int32_t>(), s);
  }));
  r = Row{"kernel", "LogSumExpRows", "rows=" + std::to_string(rows) + " vocab=128256"};
  r.bytes = logit_bytes + 8.0 * rows;
  RETURN_IF_ERROR(Bench(ctx, r, {{rows * kVocab, ElemType::kF32}}, [&](const Set& b, cudaStream_t s) {
    return k::LogSumExpRows(b[0].as<float>(), rows, kVocab, out.as<double>(), s);
  }));
  const size_t ws_bytes = k::SampleRowsWorkspaceBytes(rows, kVocab);
  ASSIGN_OR_RETURN(DeviceMem ws, DeviceMem::Alloc(static_cast<int64_t>(ws_bytes)));
  struct Config {
    const char* name;
    float temperature;
    int32_t top_k;
    float top_p;
  };
  for (const Config& c : {Config{"SampleRows T=1", 1.0f, -1, 1.0f}, Config{"SampleRows T=.7 k=50 p=.9", 0.7f, 50, 0.9f}}) {
    std::vector<k::SampleRowParams> params(rows);
    for (int64_t i = 0; i < rows; ++i) {
      params[i].temperature = c.temperature;
      params[i].top_k = c.top_k;
      params[i].top_p = c.top_p;
      params[i].seed = 1000 + i;
      params[i].output_position = 7;
    }
    ASSIGN_OR_RETURN(DeviceMem d_params, DeviceMem::Alloc(static_cast<int64_t>(rows * sizeof(k::SampleRowParams))));
    RETURN_IF_ERROR(Upload(d_params.get(), params));
    r = Row{"kernel", c.name, "rows=" + std::to_string(rows) + " vocab=128256"};
    r.bytes = logit_bytes + 4.0 * rows;
    RETURN_IF_ERROR(Bench(ctx, r, {{rows * kVocab, ElemType::kF32}}, [&](const Set& b, cudaStream_t s) {
      return k::SampleRows(b[0].as<float>(), rows, kVocab, d_params.as<k::SampleRowParams>(), {}, {}, {}, ws.get(),
                           ws_bytes, out.as<int32_t>(), s);
    }));
  }
  return Status::Ok();
}

}  // namespace

Status RunKernels(Context& ctx) {
  // Shared: norm weights (also the bias), the embedding table, the rope table.
  ASSIGN_OR_RETURN(DeviceMem w, DeviceMem::Alloc(kQkv * 4));
  RETURN_IF_ERROR(FillRandom(w.get(), kQkv, ElemType::kF32, 7));
  ASSIGN_OR_RETURN(DeviceMem table, DeviceMem::Alloc(kVocab * kHidden * 2));
  RETURN_IF_ERROR(FillRandom(table.get(), kVocab * kHidden, ElemType::kBF16, 8, 0.02f));
  ASSIGN_OR_RETURN(DeviceMem cos_sin, DeviceMem::Alloc(kMaxPos * kHeadDim * 4));
  RETURN_IF_ERROR(FillRandom(cos_sin.get(), kMaxPos * kHeadDim, ElemType::kF32, 9, 0.7f));
  // Decode batch 256 and a prefill chunk of 8192 tokens.
  const std::vector<int64_t> tokens = ctx.quick ? std::vector<int64_t>{256} : std::vector<int64_t>{256, 8192};
  for (int64_t t : tokens) {
    RETURN_IF_ERROR(TokenOps(ctx, t, w, table, cos_sin));
    RETURN_IF_ERROR(ctx.report->WriteJson(ctx.json_path));
  }
  RETURN_IF_ERROR(CopyBlocksOp(ctx));
  RETURN_IF_ERROR(SamplingOps(ctx, 256));
  ctx.report->AddNote("kernel: bytes = each input read once + each output written once (f32 activations, "
                      "bf16 table/cache); fraction of the D2D copy ceiling (read+write).");
  return ctx.report->WriteJson(ctx.json_path);
}

}  // namespace tessera::cuda_bench
