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

constexpr float kEps = 1e-5f;
std::string S(int64_t v) { return std::to_string(v); }

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
  const Dims& d = ctx.dims;
  const int64_t hidden = d.hidden, inter = d.inter, q_heads = d.q_heads, kv_heads = d.kv_heads,
                head_dim = d.head_dim, vocab = d.vocab, qkv = d.qkv(), max_pos = d.max_pos;
  const double f = 4;  // bytes per f32
  Row r{"kernel", "RmsNorm", Rows(t, "dim=" + S(hidden))};
  r.bytes = f * (2.0 * t * hidden + hidden);
  RETURN_IF_ERROR(Bench(ctx, r, {{t * hidden, ElemType::kF32}, {t * hidden, ElemType::kF32}},
                        [&](const Set& b, cudaStream_t s) {
                          return k::RmsNorm(b[0].as<float>(), w.as<float>(), t, hidden, kEps, b[1].as<float>(), s);
                        }));
  r = Row{"kernel", "AddRmsNorm", Rows(t, "dim=" + S(hidden))};
  r.bytes = f * (4.0 * t * hidden + hidden);
  RETURN_IF_ERROR(Bench(ctx, r,
                        {{t * hidden, ElemType::kF32}, {t * hidden, ElemType::kF32}, {t * hidden, ElemType::kF32}},
                        [&](const Set& b, cudaStream_t s) {
                          return k::AddRmsNorm(b[0].as<float>(), b[1].as<float>(), w.as<float>(), t, hidden, kEps,
                                               b[2].as<float>(), s);
                        }));
  r = Row{"kernel", "HeadRmsNorm", Rows(t, "q heads=" + S(q_heads) + "x" + S(head_dim) + " in qkv rows")};
  r.bytes = f * (2.0 * t * q_heads * head_dim + head_dim);
  RETURN_IF_ERROR(Bench(ctx, r, {{t * qkv, ElemType::kF32}}, [&](const Set& b, cudaStream_t s) {
    return k::HeadRmsNorm(b[0].as<float>(), t, q_heads, head_dim, qkv, w.as<float>(), kEps, s);
  }));
  r = Row{"kernel", "SiluMul", Rows(t, "inter=" + S(inter))};
  r.bytes = f * 3.0 * t * inter;
  RETURN_IF_ERROR(Bench(ctx, r, {{t * 2 * inter, ElemType::kF32}, {t * inter, ElemType::kF32}},
                        [&](const Set& b, cudaStream_t s) {
                          return k::SiluMul(b[0].as<float>(), t, inter, b[1].as<float>(), s);
                        }));

  std::mt19937 rng(static_cast<uint32_t>(t));
  std::vector<int32_t> pos(t), ids(t);
  for (auto& p : pos) p = static_cast<int32_t>(rng() % max_pos);
  for (auto& i : ids) i = static_cast<int32_t>(rng() % vocab);
  ASSIGN_OR_RETURN(DeviceMem d_pos, UploadInts(pos));
  ASSIGN_OR_RETURN(DeviceMem d_ids, UploadInts(ids));
  r = Row{"kernel", "Rope", Rows(t, "q+k heads=" + S(q_heads + kv_heads) + "x" + S(head_dim) + ", rot=" + S(head_dim))};
  r.bytes = f * (2.0 * t * (q_heads + kv_heads) * head_dim + t * head_dim) + 4.0 * t;
  RETURN_IF_ERROR(Bench(ctx, r, {{t * qkv, ElemType::kF32}}, [&](const Set& b, cudaStream_t s) {
    return k::Rope(b[0].as<float>(), t, q_heads + kv_heads, head_dim, qkv, head_dim, d_pos.as<int32_t>(),
                   cos_sin.as<float>(), s);
  }));
  r = Row{"kernel", "Embedding", Rows(t, "bf16 table " + S(vocab) + "x" + S(hidden))};
  r.bytes = 2.0 * t * hidden + f * t * hidden + 4.0 * t;
  RETURN_IF_ERROR(Bench(ctx, r, {{t * hidden, ElemType::kF32}}, [&](const Set& b, cudaStream_t s) {
    return k::Embedding(table.get(), ElemType::kBF16, hidden, d_ids.as<int32_t>(), t, b[0].as<float>(), s);
  }));

  // WriteKv: distinct random slots in a cache of max(4t, 8 max_pos) slots, bf16.
  const int64_t slots = std::max<int64_t>(4 * t, 8 * max_pos);
  std::vector<int64_t> perm(slots);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  perm.resize(t);
  ASSIGN_OR_RETURN(DeviceMem d_slots, DeviceMem::Alloc(t * 8));
  RETURN_IF_ERROR(Upload(d_slots.get(), perm));
  const int64_t kv_row = kv_heads * head_dim;
  ASSIGN_OR_RETURN(DeviceMem kc, DeviceMem::Alloc(slots * kv_row * 2));
  ASSIGN_OR_RETURN(DeviceMem vc, DeviceMem::Alloc(slots * kv_row * 2));
  r = Row{"kernel", "WriteKv", Rows(t, "kv=" + S(kv_heads) + "x" + S(head_dim) + " f32 -> bf16 cache")};
  r.bytes = 2.0 * t * kv_row * (4 + 2) + 8.0 * t;
  RETURN_IF_ERROR(Bench(ctx, r, {{t * qkv, ElemType::kF32}}, [&](const Set& b, cudaStream_t s) {
    const float* x = b[0].as<float>();  // fused q|k|v rows
    return k::WriteKv(x + q_heads * head_dim, qkv, x + (q_heads + kv_heads) * head_dim, qkv, t, kv_heads,
                      head_dim, d_slots.as<int64_t>(), kc.get(), vc.get(), ElemType::kBF16, s);
  }));

  // GatherRows: the rows whose logits are wanted (one per sequence).
  const int64_t n = std::min<int64_t>(t, 256);
  std::vector<int32_t> rows(n);
  for (int64_t i = 0; i < n; ++i) rows[i] = static_cast<int32_t>(i * (t / n));
  ASSIGN_OR_RETURN(DeviceMem d_rows, UploadInts(rows));
  r = Row{"kernel", "GatherRows", Rows(t, "n=" + S(n) + " cols=" + S(hidden))};
  r.bytes = f * 2.0 * n * hidden + 4.0 * n;
  RETURN_IF_ERROR(Bench(ctx, r, {{t * hidden, ElemType::kF32}, {n * hidden, ElemType::kF32}},
                        [&](const Set& b, cudaStream_t s) {
                          return k::GatherRows(b[0].as<float>(), hidden, d_rows.as<int32_t>(), n, b[1].as<float>(), s);
                        }));
  r = Row{"kernel", "ConvertFromF32", Rows(t, "cols=" + S(inter) + " -> bf16")};
  r.bytes = 6.0 * t * inter;
  RETURN_IF_ERROR(Bench(ctx, r, {{t * inter, ElemType::kF32}, {t * inter, ElemType::kBF16}},
                        [&](const Set& b, cudaStream_t s) {
                          return k::ConvertFromF32(b[0].as<float>(), inter, t, inter, b[1].get(), ElemType::kBF16,
                                                   inter, s);
                        }));
  r = Row{"kernel", "AddBias", Rows(t, "cols=" + S(qkv))};
  r.bytes = f * (2.0 * t * qkv + qkv);
  return Bench(ctx, r, {{t * qkv, ElemType::kF32}}, [&](const Set& b, cudaStream_t s) {
    return k::AddBias(b[0].as<float>(), qkv, t, qkv, w.as<float>(), s);
  });
}

// CopyBlocks as a swap-in of 64 blocks in every layer and side of the 8B model.
Status CopyBlocksOp(Context& ctx) {
  const int64_t num_layers = ctx.dims.copy_layers, blocks = ctx.dims.copy_blocks, num_pairs = ctx.dims.copy_pairs;
  const int64_t block_bytes = 16 * ctx.dims.kv_heads * ctx.dims.head_dim * 2;  // 16 tokens, bf16
  std::vector<DeviceMem> layers;
  std::vector<void*> bases;
  for (int64_t i = 0; i < 2 * num_layers; ++i) {
    ASSIGN_OR_RETURN(DeviceMem m, DeviceMem::Alloc(blocks * block_bytes));
    RETURN_IF_ERROR(FillRandom(m.get(), blocks * block_bytes / 2, ElemType::kBF16, 500 + i));
    bases.push_back(m.get());
    layers.push_back(std::move(m));
  }
  std::vector<int64_t> pairs;
  for (int64_t p = 0; p < num_pairs; ++p) {
    pairs.push_back(3 * p % (blocks / 2));  // src in the lower half, dst in the upper: no chains
    pairs.push_back(blocks / 2 + (5 * p) % (blocks / 2));
  }
  ASSIGN_OR_RETURN(DeviceMem d_bases, DeviceMem::Alloc(static_cast<int64_t>(bases.size() * sizeof(void*))));
  RETURN_IF_ERROR(Upload(d_bases.get(), bases));
  ASSIGN_OR_RETURN(DeviceMem d_pairs, DeviceMem::Alloc(static_cast<int64_t>(pairs.size() * 8)));
  RETURN_IF_ERROR(Upload(d_pairs.get(), pairs));
  Row r{"kernel", "CopyBlocks",
        S(2 * num_layers) + " layer-sides x " + S(num_pairs) + " blocks x " + S(block_bytes >> 10) + " KiB"};
  r.bytes = 2.0 * 2 * num_layers * num_pairs * block_bytes;
  return AddTimed(ctx, r, TimeOp(ctx.stream, 1, [&](int, cudaStream_t s) {
                    return k::CopyBlocks(d_bases.as<void* const>(), 2 * num_layers, block_bytes,
                                         d_pairs.as<const int64_t>(), num_pairs, s);
                  }));
}

// Logits processing on a decode step's logits [rows, vocab]: bytes = the logits
// read once (the fewest any of them can move), so the fraction of the copy
// ceiling also says how many passes over the logits an op effectively makes.
Status SamplingOps(Context& ctx, int64_t rows) {
  const int64_t vocab = ctx.dims.vocab;
  const double logit_bytes = 4.0 * rows * vocab;
  ASSIGN_OR_RETURN(DeviceMem out, DeviceMem::Alloc(rows * 8));
  Row r{"kernel", "ArgmaxRows", "rows=" + S(rows) + " vocab=" + S(vocab)};
  r.bytes = logit_bytes + 4.0 * rows;
  RETURN_IF_ERROR(Bench(ctx, r, {{rows * vocab, ElemType::kF32}}, [&](const Set& b, cudaStream_t s) {
    return k::ArgmaxRows(b[0].as<float>(), rows, vocab, out.as<int32_t>(), s);
  }));
  r = Row{"kernel", "LogSumExpRows", "rows=" + S(rows) + " vocab=" + S(vocab)};
  r.bytes = logit_bytes + 8.0 * rows;
  RETURN_IF_ERROR(Bench(ctx, r, {{rows * vocab, ElemType::kF32}}, [&](const Set& b, cudaStream_t s) {
    return k::LogSumExpRows(b[0].as<float>(), rows, vocab, out.as<double>(), s);
  }));
  const size_t ws_bytes = k::SampleRowsWorkspaceBytes(rows, vocab);
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
    r = Row{"kernel", c.name, "rows=" + S(rows) + " vocab=" + S(vocab)};
    r.bytes = logit_bytes + 4.0 * rows;
    RETURN_IF_ERROR(Bench(ctx, r, {{rows * vocab, ElemType::kF32}}, [&](const Set& b, cudaStream_t s) {
      return k::SampleRows(b[0].as<float>(), rows, vocab, d_params.as<k::SampleRowParams>(), {}, {}, {}, ws.get(),
                           ws_bytes, out.as<int32_t>(), s);
    }));
  }
  return Status::Ok();
}

}  // namespace

Status RunKernels(Context& ctx) {
  const Dims& d = ctx.dims;
  const int64_t qkv = d.qkv(), vocab = d.vocab, hidden = d.hidden, max_pos = d.max_pos, head_dim = d.head_dim;
  // Shared: norm weights (also the bias), the embedding table, the rope table.
  ASSIGN_OR_RETURN(DeviceMem w, DeviceMem::Alloc(qkv * 4));
  RETURN_IF_ERROR(FillRandom(w.get(), qkv, ElemType::kF32, 7));
  ASSIGN_OR_RETURN(DeviceMem table, DeviceMem::Alloc(vocab * hidden * 2));
  RETURN_IF_ERROR(FillRandom(table.get(), vocab * hidden, ElemType::kBF16, 8, 0.02f));
  ASSIGN_OR_RETURN(DeviceMem cos_sin, DeviceMem::Alloc(max_pos * head_dim * 4));
  RETURN_IF_ERROR(FillRandom(cos_sin.get(), max_pos * head_dim, ElemType::kF32, 9, 0.7f));
  // Decode batch 256 and a prefill chunk of 8192 tokens.
  for (int64_t t : d.tokens) {
    RETURN_IF_ERROR(TokenOps(ctx, t, w, table, cos_sin));
    RETURN_IF_ERROR(ctx.report->WriteJson(ctx.json_path));
  }
  RETURN_IF_ERROR(CopyBlocksOp(ctx));
  RETURN_IF_ERROR(SamplingOps(ctx, d.sample_rows));
  ctx.report->AddNote("kernel: bytes = each input read once + each output written once (f32 activations, "
                      "bf16 table/cache); fraction of the D2D copy ceiling (read+write).");
  return ctx.report->WriteJson(ctx.json_path);
}

}  // namespace tessera::cuda_bench
