// Paged attention (Llama-3-8B heads: 32 q / 8 kv x 128, bf16 cache, 16-token
// blocks, block tables over a shuffled pool): decode as KV bytes read per second
// against the D2D ceiling; prefill (and chunked prefill) as FLOP/s.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>

#include "bench/cuda/sections.h"
#include "kernels/cuda/paged_attention.cuh"

namespace tessera::cuda_bench {
namespace {

namespace k = kernels::cuda;

constexpr int64_t kBlock = 16;

int64_t Blocks(int64_t context) { return (context + kBlock - 1) / kBlock; }
std::string S(int64_t v) { return std::to_string(v); }

// The KV pool shared by every point, with its blocks in a shuffled order, and
// the head shapes (Dims).
struct Pool {
  explicit Pool(const Dims& d)
      : q_heads(d.q_heads), kv_heads(d.kv_heads), head_dim(d.head_dim), q_stride(d.qkv()),
        block_elems(kBlock * d.kv_heads * d.head_dim), kv_bytes_per_token(2 * d.kv_heads * d.head_dim * 2) {}
  const int64_t q_heads, kv_heads, head_dim;
  const int64_t q_stride;          // q inside fused qkv rows
  const int64_t block_elems;       // one block, one side
  const int64_t kv_bytes_per_token;  // K + V, bf16
  std::string Heads() const { return S(q_heads) + "/" + S(kv_heads) + "x" + S(head_dim) + " bf16"; }
  DeviceMem k, v;
  int64_t blocks = 0;
  std::vector<int32_t> order;
};

k::PagedAttentionArgs BaseArgs(const Pool& pool) {
  const int64_t q_heads = pool.q_heads, kv_heads = pool.kv_heads, head_dim = pool.head_dim,
                q_stride = pool.q_stride;
  k::PagedAttentionArgs a;
  a.k_cache = pool.k.get();
  a.v_cache = pool.v.get();
  a.cache_type = ElemType::kBF16;
  a.num_q_heads = q_heads;
  a.num_kv_heads = kv_heads;
  a.head_dim = head_dim;
  a.block_size = kBlock;
  a.q_stride = q_stride;
  a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  return a;
}

// One launch's inputs: `seqs` sequences, query tokens at positions
// [context - queries, context) of each (decode: queries = 1).
struct Inputs {
  DeviceMem q, out, positions, token_to_seq, tables, tiles;
  int64_t tokens = 0, blocks_per_seq = 0, num_tiles = 0;
};

StatusOr<Inputs> MakeInputs(const Pool& pool, int64_t first_block, int64_t seqs, int64_t context,
                            int64_t queries, bool prefill_tiles, uint64_t seed) {
  const int64_t q_heads = pool.q_heads, head_dim = pool.head_dim, q_stride = pool.q_stride;
  Inputs in;
  in.tokens = seqs * queries;
  in.blocks_per_seq = Blocks(context);
  std::vector<int32_t> pos, t2s, tables;
  std::vector<k::PrefillTile> tiles;
  for (int64_t s = 0; s < seqs; ++s) {
    for (int64_t j = 0; j < in.blocks_per_seq; ++j) tables.push_back(pool.order[first_block + s * in.blocks_per_seq + j]);
    const int64_t first = static_cast<int64_t>(pos.size());
    for (int64_t p = context - queries; p < context; ++p) {
      pos.push_back(static_cast<int32_t>(p));
      t2s.push_back(static_cast<int32_t>(s));
    }
    for (int64_t t = 0; t < queries; t += k::kPrefillTileQ) {
      tiles.push_back({static_cast<int32_t>(first + t), static_cast<int32_t>(std::min(k::kPrefillTileQ, queries - t))});
    }
  }
  ASSIGN_OR_RETURN(in.q, DeviceMem::Alloc(in.tokens * q_stride * 4));
  RETURN_IF_ERROR(FillRandom(in.q.get(), in.tokens * q_stride, ElemType::kF32, seed));
  ASSIGN_OR_RETURN(in.out, DeviceMem::Alloc(in.tokens * q_heads * head_dim * 4));
  ASSIGN_OR_RETURN(in.positions, DeviceMem::Alloc(in.tokens * 4));
  ASSIGN_OR_RETURN(in.token_to_seq, DeviceMem::Alloc(in.tokens * 4));
  ASSIGN_OR_RETURN(in.tables, DeviceMem::Alloc(static_cast<int64_t>(tables.size()) * 4));
  RETURN_IF_ERROR(Upload(in.positions.get(), pos));
  RETURN_IF_ERROR(Upload(in.token_to_seq.get(), t2s));
  RETURN_IF_ERROR(Upload(in.tables.get(), tables));
  if (prefill_tiles) {
    in.num_tiles = static_cast<int64_t>(tiles.size());
    ASSIGN_OR_RETURN(in.tiles, DeviceMem::Alloc(in.num_tiles * static_cast<int64_t>(sizeof(k::PrefillTile))));
    RETURN_IF_ERROR(Upload(in.tiles.get(), tiles));
  }
  return in;
}

k::PagedAttentionArgs ArgsFor(const Pool& pool, const Inputs& in, int64_t context, void* ws, int64_t ws_bytes) {
  k::PagedAttentionArgs a = BaseArgs(pool);
  a.q = in.q.as<float>();
  a.num_tokens = in.tokens;
  a.positions = in.positions.as<int32_t>();
  a.token_to_seq = in.token_to_seq.as<int32_t>();
  a.block_tables = in.tables.as<int32_t>();
  a.max_blocks_per_seq = in.blocks_per_seq;
  a.out = in.out.as<float>();
  a.max_context = context;
  a.workspace = ws;
  a.workspace_bytes = ws_bytes;
  return a;
}

double CausalFlops(const Pool& pool, int64_t context, int64_t queries) {
  double keys = 0;  // sum over query positions p of (p + 1)
  for (int64_t p = context - queries; p < context; ++p) keys += static_cast<double>(p + 1);
  return 4.0 * pool.head_dim * pool.q_heads * keys;
}

Status DecodePoint(Context& ctx, const Pool& pool, int64_t batch, int64_t context) {
  const int64_t q_heads = pool.q_heads, head_dim = pool.head_dim;
  Row row{"attention", "PagedAttentionDecode", "batch=" + S(batch) + " ctx=" + S(context) + " " + pool.Heads()};
  const double kv_bytes = static_cast<double>(batch) * context * pool.kv_bytes_per_token;
  row.bytes = kv_bytes + 2.0 * batch * q_heads * head_dim * 4;  // + q read, out written
  row.flops = 4.0 * head_dim * q_heads * context * batch;
  const int64_t per_set = batch * Blocks(context);
  if (per_set > pool.blocks) {
    row.error = "skipped: KV of this point does not fit the pool";
    ctx.report->Add(row);
    return Status::Ok();
  }
  if (ctx.OutOfTime()) {
    row.error = "skipped: time budget";
    ctx.report->Add(row);
    return Status::Ok();
  }
  // Rotate over disjoint block ranges when one point's KV would stay in L2.
  const int sets = static_cast<int>(std::min<int64_t>(
      RotatingSets(static_cast<int64_t>(kv_bytes), ctx.l2_bytes, int64_t{1} << 40), pool.blocks / per_set));
  row.extra["rotating_sets"] = sets;
  auto measure = [&]() -> StatusOr<Timing> {
    std::vector<Inputs> ins;
    for (int s = 0; s < sets; ++s) {
      ASSIGN_OR_RETURN(Inputs in, MakeInputs(pool, s * per_set, batch, context, 1, false, 40 + s));
      ins.push_back(std::move(in));
    }
    const int64_t ws_bytes = k::PagedAttentionWorkspaceBytes(batch, q_heads, head_dim, context);
    ASSIGN_OR_RETURN(DeviceMem ws, DeviceMem::Alloc(ws_bytes));
    std::vector<k::PagedAttentionArgs> args;
    for (const Inputs& in : ins) args.push_back(ArgsFor(pool, in, context, ws.get(), ws_bytes));
    return TimeOp(ctx.stream, sets, [&](int v, cudaStream_t s) { return k::PagedAttentionDecode(args[v], s); });
  };
  return AddTimed(ctx, row, measure());
}

// One sequence of `context` tokens whose last `queries` tokens are the query
// (queries == context: a whole prompt). use_decode: the deterministic mode's path.
Status PrefillPoint(Context& ctx, const Pool& pool, int64_t context, int64_t queries, bool use_decode) {
  const int64_t q_heads = pool.q_heads, head_dim = pool.head_dim;
  Row row{"attention", use_decode ? "Prefill via Decode kernel" : "PagedAttentionPrefill",
          (queries == context ? "prompt=" + S(context) : "chunk=" + S(queries) + " at ctx=" + S(context)) + " " +
              pool.Heads()};
  row.flops = CausalFlops(pool, context, queries);
  if (Blocks(context) > pool.blocks || ctx.OutOfTime()) {
    row.error = ctx.OutOfTime() ? "skipped: time budget" : "skipped: does not fit the pool";
    ctx.report->Add(row);
    return Status::Ok();
  }
  auto measure = [&]() -> StatusOr<Timing> {
    ASSIGN_OR_RETURN(Inputs in, MakeInputs(pool, 0, 1, context, queries, !use_decode, 77));
    const int64_t ws_bytes =
        use_decode ? k::PagedAttentionWorkspaceBytes(in.tokens, q_heads, head_dim, context) : 0;
    ASSIGN_OR_RETURN(DeviceMem ws, DeviceMem::Alloc(ws_bytes));
    const k::PagedAttentionArgs a = ArgsFor(pool, in, context, ws.get(), ws_bytes);
    TimeOptions to;
    to.min_repeats = 3;
    return TimeOp(ctx.stream, 1, [&](int, cudaStream_t s) {
      return use_decode ? k::PagedAttentionDecode(a, s)
                        : k::PagedAttentionPrefill(a, in.tiles.as<k::PrefillTile>(), in.num_tiles, s);
    }, to);
  };
  return AddTimed(ctx, row, measure());
}

}  // namespace

Status RunAttention(Context& ctx) {
  const Dims& d = ctx.dims;
  const std::vector<int64_t>& batches = d.attn_batches;
  const std::vector<int64_t>& contexts = d.attn_contexts;
  Pool pool(d);
  const int64_t block_elems = pool.block_elems;
  // Pool: the largest point (or what 60% of free memory holds), at least 3x L2
  // for the small points' rotation.
  int64_t want = 0;
  for (int64_t b : batches) want = std::max(want, b * Blocks(contexts.back()));
  const int64_t block_pair = 2 * block_elems * 2;
  const int64_t fit = static_cast<int64_t>(0.6 * static_cast<double>(FreeDeviceBytes())) / block_pair;
  pool.blocks = std::max<int64_t>(std::min(want, fit), 0);
  if (pool.blocks == 0) return ResourceExhausted("attention: no device memory for a KV pool");
  ASSIGN_OR_RETURN(pool.k, DeviceMem::Alloc(pool.blocks * block_elems * 2));
  ASSIGN_OR_RETURN(pool.v, DeviceMem::Alloc(pool.blocks * block_elems * 2));
  RETURN_IF_ERROR(FillRandom(pool.k.get(), pool.blocks * block_elems, ElemType::kBF16, 31));
  RETURN_IF_ERROR(FillRandom(pool.v.get(), pool.blocks * block_elems, ElemType::kBF16, 32));
  pool.order.resize(pool.blocks);
  std::iota(pool.order.begin(), pool.order.end(), 0);
  std::shuffle(pool.order.begin(), pool.order.end(), std::mt19937(5));
  ctx.report->root()["attention_pool_gib"] = static_cast<double>(pool.blocks * block_pair) / (1 << 30);

  for (int64_t b : batches) {
    for (int64_t c : contexts) RETURN_IF_ERROR(DecodePoint(ctx, pool, b, c));
    RETURN_IF_ERROR(ctx.report->WriteJson(ctx.json_path));
  }
  for (int64_t p : d.prompts) RETURN_IF_ERROR(PrefillPoint(ctx, pool, p, p, false));
  RETURN_IF_ERROR(PrefillPoint(ctx, pool, d.chunk_context, d.chunk, false));  // a chunked-prefill step
  RETURN_IF_ERROR(PrefillPoint(ctx, pool, d.decode_prefill_prompt, d.decode_prefill_prompt, true));
  ctx.report->AddNote("attention: decode bytes = K+V of every sequence's context (bf16) + q + out; "
                      "FLOPs = 4 x head_dim x q_heads per (query, key) pair, causal.");
  return ctx.report->WriteJson(ctx.json_path);
}

}  // namespace tessera::cuda_bench
