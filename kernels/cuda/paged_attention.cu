// Paged attention on the GPU: split-K decode (+ combine) and tiled prefill.
// Contract and semantics: paged_attention.cuh.
//
// Decode: CTA (token, kv head, chunk c) owns keys [lo + c*kSplitKeys, ...) of its
// token (lo = first key in the window). Chunks are placed relative to the token's own
// key range, so which keys a chunk holds and every reduction inside it depend only on
// the token; max_context only sets how many CTAs exit at once. Per q head of the group
// it writes (max, sum exp, unnormalised out) to the workspace; CombineKernel merges
// the token's chunks in chunk order (also for a single chunk).
// Prefill: CTA (tile, kv head) streams key blocks aligned to multiples of the block
// length through shared memory (f32); a warp owns (query, head) rows, a lane owns one
// key for the scores and 32-strided output columns for the online softmax.
#include "kernels/cuda/paged_attention.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kGroupPass = 8;  // q heads per decode pass (their q sits in registers)
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float ToF32(float x) { return x; }
__device__ __forceinline__ float ToF32(__half x) { return __half2float(x); }
__device__ __forceinline__ float ToF32(__nv_bfloat16 x) { return __bfloat162float(x); }

// Fixed xor trees: every lane gets the same value, in the same order each call.
__device__ __forceinline__ float WarpSum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFull, v, off);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, off));
  return v;
}

__host__ __device__ __forceinline__ int64_t FirstKey(int64_t p, int64_t window) {
  if (window <= 0) return 0;
  const int64_t lo = p - window + 1;
  return lo > 0 ? lo : 0;
}

// Element offset of (key position pos, kv head) in the cache; -1 when the block
// table has no block there (never for keys a valid token attends to).
__device__ __forceinline__ int64_t SlotOffset(const int32_t* table, int64_t pos, int64_t bs, int64_t row,
                                              int64_t off) {
  const int32_t b = table[pos / bs];
  return b < 0 ? -1 : (static_cast<int64_t>(b) * bs + pos % bs) * row + off;
}

// Attention logit soft-capping (Gemma 2): cap * tanh(s / cap); cap <= 0 leaves s.
__device__ __forceinline__ float Cap(float s, float cap) { return cap > 0.f ? cap * tanhf(s / cap) : s; }

// q . k over HD columns in lane-rotated order (column (dd + lane) mod HD at step dd):
// 32 lanes reading rows of q and k from shared memory hit distinct banks. The order
// depends on the lane only, and a key's lane depends on its position only.
template <int HD>
__device__ __forceinline__ float RotatedDot(const float* q, const float* k, int lane) {
  float dot = 0.f;
  int d = lane;
#pragma unroll 8
  for (int dd = 0; dd < HD; ++dd) {
    dot += q[d] * k[d];
    if (++d == HD) d = 0;
  }
  return dot;
}

int64_t NumSplits(int64_t max_context) { return max_context <= 0 ? 0 : (max_context + kSplitKeys - 1) / kSplitKeys; }

// Workspace: float2 (max, sum) per (token, q head, split), then out[head_dim] each.
int64_t MlBytes(int64_t parts) { return (parts * 8 + 255) / 256 * 256; }

// Four consecutive cache elements as f32: one 16-byte (f32) or 8-byte (f16/bf16)
// load when the cache is aligned for it, else four scalar loads.
template <typename T>
struct alignas(4 * sizeof(T)) Vec4 {
  T v[4];
};
template <typename T>
__device__ __forceinline__ void Load4(const T* p, bool aligned, float* dst) {
  if (aligned) {
    const Vec4<T> x = *reinterpret_cast<const Vec4<T>*>(p);
#pragma unroll
    for (int i = 0; i < 4; ++i) dst[i] = ToF32(x.v[i]);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) dst[i] = ToF32(p[i]);
  }
}

// ---------------------------------------------------------------------------
// Decode, one split. T: cache element; E = head_dim / 32; aligned: K/V bases allow
// Load4's vector load (slot offsets are multiples of head_dim elements).
template <typename T, int E>
__global__ void __launch_bounds__(kThreads)
    DecodeSplitKernel(PagedAttentionArgs a, int64_t splits, bool aligned, float2* ml, float* po) {
  constexpr int HD = 32 * E;
  constexpr int KB = HD <= 128 ? 32 : 16;  // keys staged per phase-1 step
  constexpr int TPR = HD / 4;              // phase 3: threads per row, 4 columns each
  constexpr int P = kThreads / TPR;        // phase 3: key parts, summed in part order
  constexpr int kStage = KB * HD > P * kGroupPass * HD ? KB * HD : P * kGroupPass * HD;
  __shared__ float sp[kGroupPass][kSplitKeys];  // scores, then exp(score - max)
  __shared__ float qs[kGroupPass * HD];
  __shared__ float stage[kStage];           // K block (phase 1), part sums (phase 3)
  __shared__ int64_t slot[kSplitKeys];      // cache offset of each key of the chunk

  const int64_t t = blockIdx.x, kvh = blockIdx.y, c = blockIdx.z;
  const int64_t p = a.positions[t];
  if (p < 0) return;
  const int64_t lo = FirstKey(p, a.sliding_window);
  const int64_t k0 = lo + c * kSplitKeys;
  if (k0 > p) return;  // past this token's keys: uniform exit, before any barrier
  const int n = static_cast<int>(p - k0 + 1 < kSplitKeys ? p - k0 + 1 : kSplitKeys);

  const int64_t group = a.num_q_heads / a.num_kv_heads;
  const int32_t* table = a.block_tables + static_cast<int64_t>(a.token_to_seq[t]) * a.max_blocks_per_seq;
  for (int j = threadIdx.x; j < n; j += kThreads) {
    slot[j] = SlotOffset(table, k0 + j, a.block_size, a.num_kv_heads * HD, kvh * HD);
  }
  const T* kc = static_cast<const T*>(a.k_cache);
  const T* vc = static_cast<const T*>(a.v_cache);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int part = static_cast<int>(threadIdx.x) / TPR, col = static_cast<int>(threadIdx.x) % TPR * 4;
  const bool active = part < P;
  const int jb = active ? n * part / P : 0, je = active ? n * (part + 1) / P : 0;

  for (int64_t g0 = 0; g0 < group; g0 += kGroupPass) {
    const int gn = static_cast<int>(group - g0 < kGroupPass ? group - g0 : kGroupPass);
    const int64_t h0 = kvh * group + g0;  // first q head of this pass
    // Phase 1: scores. K is staged in shared memory KB keys at a time (f32); lane j
    // of the warp owning head g computes q_g . k_j.
    for (int i = threadIdx.x; i < kGroupPass * HD; i += kThreads) {
      const int g = i / HD;
      qs[i] = g < gn ? a.q[t * a.q_stride + (h0 + g) * HD + i % HD] : 0.f;
    }
    for (int kb = 0; kb < n; kb += KB) {
      __syncthreads();  // qs and slot written, previous K block consumed
      for (int i = threadIdx.x * 4; i < KB * HD; i += kThreads * 4) {
        const int j = kb + i / HD;
        float x[4] = {0.f, 0.f, 0.f, 0.f};
        if (j < n && slot[j] >= 0) Load4(kc + slot[j] + i % HD, aligned, x);
#pragma unroll
        for (int e = 0; e < 4; ++e) stage[i + e] = x[e];
      }
      __syncthreads();
      for (int g = warp; g < gn; g += kWarps) {
        if (lane < KB && kb + lane < n) {
          sp[g][kb + lane] = Cap(RotatedDot<HD>(qs + g * HD, stage + lane * HD, lane) * a.scale, a.softcap);
        }
      }
    }
    __syncthreads();
    // Phase 2: per head max and sum of exp over the chunk; a warp per head.
    for (int g = warp; g < gn; g += kWarps) {
      float m = -INFINITY;
      for (int j = lane; j < n; j += 32) m = fmaxf(m, sp[g][j]);
      m = WarpMax(m);
      float l = 0.f;
      for (int j = lane; j < n; j += 32) {
        const float e = expf(sp[g][j] - m);
        sp[g][j] = e;
        l += e;
      }
      l = WarpSum(l);
      if (lane == 0) ml[((t * a.num_q_heads) + h0 + g) * splits + c] = make_float2(m, l);
    }
    __syncthreads();
    // Phase 3: out[g][d] = sum_j e[g][j] * v_j[d]. Part r sums keys [n*r/P, n*(r+1)/P)
    // in order for 4 columns; the parts are then added in part order.
    float acc[kGroupPass][4];
#pragma unroll
    for (int g = 0; g < kGroupPass; ++g)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[g][e] = 0.f;
    for (int j = jb; j < je; ++j) {
      if (slot[j] < 0) continue;
      float v[4];
      Load4(vc + slot[j] + col, aligned, v);
#pragma unroll
      for (int g = 0; g < kGroupPass; ++g) {
        if (g < gn) {  // not `break`: clang refuses to unroll a loop with an early exit
          const float w = sp[g][j];
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[g][e] += w * v[e];
        }
      }
    }
    if (active) {
#pragma unroll
      for (int g = 0; g < kGroupPass; ++g) {
        if (g < gn) {
#pragma unroll
          for (int e = 0; e < 4; ++e) stage[(part * kGroupPass + g) * HD + col + e] = acc[g][e];
        }
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < gn * HD; i += kThreads) {
      const int g = i / HD, d = i % HD;
      float sum = stage[g * HD + d];
      for (int r = 1; r < P; ++r) sum += stage[(r * kGroupPass + g) * HD + d];
      po[(((t * a.num_q_heads) + h0 + g) * splits + c) * HD + d] = sum;
    }
    __syncthreads();  // sp / qs / stage are rewritten by the next pass
  }
}

// Merges a token's chunks in chunk order. Block (token, slice of kCombineThreads
// outputs over [q_heads * head_dim]); a thread per output element.
constexpr int kCombineThreads = 256;
__global__ void __launch_bounds__(kCombineThreads)
    CombineKernel(const int32_t* positions, int64_t window, int64_t num_q_heads, int64_t hd, int64_t splits,
                  const float2* ml, const float* po, float* out) {
  const int64_t t = blockIdx.x, i = static_cast<int64_t>(blockIdx.y) * kCombineThreads + threadIdx.x;
  if (i >= num_q_heads * hd) return;
  const int64_t h = i / hd, d = i % hd;
  const int64_t p = positions[t];
  int64_t nc = 0;
  if (p >= 0) {
    nc = (p - FirstKey(p, window) + 1 + kSplitKeys - 1) / kSplitKeys;
    if (nc > splits) nc = splits;  // p >= max_context breaks the contract; stay in bounds
  }
  const int64_t base = (t * num_q_heads + h) * splits;
  float mx = -INFINITY;
  for (int64_t c = 0; c < nc; ++c) mx = fmaxf(mx, ml[base + c].x);
  float sum = 0.f, acc = 0.f;
  for (int64_t c = 0; c < nc; ++c) {
    const float w = expf(ml[base + c].x - mx);
    sum += ml[base + c].y * w;
    acc += po[(base + c) * hd + d] * w;
  }
  out[t * num_q_heads * hd + i] = nc > 0 ? acc / sum : 0.f;
}

// ---------------------------------------------------------------------------
// Prefill. Shared memory (dynamic, f32): Q rows of a pass, then a K and a V block.
template <int E>
struct PrefillShape {
  static constexpr int kHd = 32 * E;
  static constexpr int kKeys = E <= 4 ? 32 : 16;  // keys per block
  // (query, head) rows per warp: register budget, then what fits 48 KB next to the
  // K and V blocks and the per-warp probability rows.
  static constexpr int kFitRows = (12288 - kWarps * 32 - 2 * kKeys - 2 * kKeys * kHd) / kHd / kWarps;
  static constexpr int kRowsPerWarp = 32 / E < 8 ? (32 / E < kFitRows ? 32 / E : kFitRows)
                                                 : (8 < kFitRows ? 8 : kFitRows);
  static constexpr int kRows = kRowsPerWarp * kWarps;  // rows per pass
  static constexpr int64_t kSmemBytes =
      (static_cast<int64_t>(kRows + 2 * kKeys) * kHd + kWarps * 32) * 4 + kKeys * 8;
  static_assert(kRowsPerWarp >= 1 && kSmemBytes <= 48 * 1024, "prefill shared memory over the default 48 KB");
};

template <typename T, int E>
__global__ void __launch_bounds__(kThreads)
    PrefillKernel(PagedAttentionArgs a, const PrefillTile* tiles, bool aligned) {
  using S = PrefillShape<E>;
  constexpr int HD = S::kHd, KB = S::kKeys, RPW = S::kRowsPerWarp;
  TESSERA_DYNAMIC_SMEM(float, smem);
  float* qs = smem;                // [kRows][HD]
  float* ks = qs + S::kRows * HD;  // [KB][HD]
  float* vs = ks + KB * HD;        // [KB][HD]
  float* pw = vs + KB * HD + (threadIdx.x >> 5) * 32;  // this warp's probabilities
  int64_t* kslot = reinterpret_cast<int64_t*>(vs + KB * HD + kWarps * 32);  // [KB] cache offsets

  const PrefillTile tile = tiles[blockIdx.x];
  const int64_t kvh = blockIdx.y;
  const int64_t group = a.num_q_heads / a.num_kv_heads;
  const int64_t rows = tile.num_tokens * group;  // row r: token r / group, head r % group
  const int64_t row = a.num_kv_heads * HD, off = kvh * HD;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (tile.num_tokens <= 0) return;

  // Tile-wide key range [klo, khi]: union of the tokens' windows; the sequence is
  // that of the first non-padding token (padding may carry any sequence index).
  int64_t khi = -1, klo = INT64_MAX, seq = 0;
  for (int i = 0; i < tile.num_tokens; ++i) {
    const int64_t p = a.positions[tile.first_token + i];
    if (p < 0) continue;
    if (khi < 0) seq = a.token_to_seq[tile.first_token + i];
    khi = p > khi ? p : khi;
    const int64_t lo = FirstKey(p, a.sliding_window);
    klo = lo < klo ? lo : klo;
  }
  const int32_t* table = a.block_tables + seq * a.max_blocks_per_seq;
  const T* kc = static_cast<const T*>(a.k_cache);
  const T* vc = static_cast<const T*>(a.v_cache);

  for (int64_t r0 = 0; r0 < rows; r0 += S::kRows) {
    __syncthreads();  // previous pass is done with qs
    for (int i = threadIdx.x; i < S::kRows * HD; i += kThreads) {
      const int64_t r = r0 + i / HD;
      qs[i] = r < rows ? a.q[(tile.first_token + r / group) * a.q_stride + (kvh * group + r % group) * HD + i % HD]
                       : 0.f;
    }
    float acc[RPW][E], m[RPW], l[RPW];
    int32_t rp[RPW];
#pragma unroll
    for (int i = 0; i < RPW; ++i) {
      const int64_t r = r0 + i * kWarps + warp;
      rp[i] = r < rows ? a.positions[tile.first_token + r / group] : -1;
      m[i] = -INFINITY;
      l[i] = 0.f;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[i][e] = 0.f;
    }
    // Blocks start at multiples of KB, so a key's lane and block (hence every
    // reduction order) depend on its position only, not on the tile.
    for (int64_t kb = khi < 0 ? 0 : klo / KB * KB; kb <= khi; kb += KB) {
      __syncthreads();  // qs written / previous block consumed
      if (threadIdx.x < KB) {
        const int64_t pos = kb + threadIdx.x;
        kslot[threadIdx.x] = pos >= klo && pos <= khi ? SlotOffset(table, pos, a.block_size, row, off) : -1;
      }
      __syncthreads();
      for (int i = threadIdx.x * 4; i < KB * HD; i += kThreads * 4) {
        const int64_t o = kslot[i / HD];
        float kx[4] = {0.f, 0.f, 0.f, 0.f}, vx[4] = {0.f, 0.f, 0.f, 0.f};
        if (o >= 0) {
          Load4(kc + o + i % HD, aligned, kx);
          Load4(vc + o + i % HD, aligned, vx);
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          ks[i + e] = kx[e];
          vs[i + e] = vx[e];
        }
      }
      __syncthreads();
#pragma unroll
      for (int i = 0; i < RPW; ++i) {
        const int rr = i * kWarps + warp;
        const int64_t p = rp[i];
        if (p < 0) continue;  // warp-uniform (also rows past the end)
        const int64_t lo = FirstKey(p, a.sliding_window);
        if (kb > p || kb + KB - 1 < lo) continue;  // block fully masked for this row
        const int64_t pos = kb + lane;
        float s = -INFINITY;
        if (lane < KB && pos >= lo && pos <= p) {
          s = Cap(RotatedDot<HD>(qs + rr * HD, ks + lane * HD, lane) * a.scale, a.softcap);
        }
        const float mn = fmaxf(m[i], WarpMax(s));  // finite: the block holds a valid key
        const float corr = expf(m[i] - mn);        // 0 on the row's first block
        const float e = expf(s - mn);              // 0 for masked keys
        l[i] = l[i] * corr + WarpSum(e);
        m[i] = mn;
#pragma unroll
        for (int c = 0; c < E; ++c) acc[i][c] *= corr;
        __syncwarp();  // the previous row's reads of pw are done
        pw[lane] = e;
        __syncwarp();
#pragma unroll 8
        for (int j = 0; j < KB; ++j) {
          const float ej = pw[j];
          const float* vr = vs + j * HD + lane;
#pragma unroll
          for (int c = 0; c < E; ++c) acc[i][c] += ej * vr[32 * c];
        }
      }
    }
#pragma unroll
    for (int i = 0; i < RPW; ++i) {
      const int64_t r = r0 + i * kWarps + warp;
      if (r >= rows) continue;
      float* o = a.out + ((tile.first_token + r / group) * a.num_q_heads + kvh * group + r % group) * HD + lane;
#pragma unroll
      for (int c = 0; c < E; ++c) o[32 * c] = rp[i] < 0 ? 0.f : acc[i][c] / l[i];
    }
  }
}

cudaError_t CheckArgs(const PagedAttentionArgs& a) {
  const bool ok = a.head_dim >= 32 && a.head_dim <= 256 && a.head_dim % 32 == 0 && a.num_kv_heads > 0 &&
                  a.num_q_heads >= a.num_kv_heads && a.num_q_heads % a.num_kv_heads == 0 && a.block_size > 0 &&
                  a.num_tokens <= INT32_MAX && a.num_q_heads <= 65535 && a.num_kv_heads <= 65535 &&
                  (a.cache_type == ElemType::kF32 || a.cache_type == ElemType::kF16 ||
                   a.cache_type == ElemType::kBF16);
  return ok ? cudaSuccess : cudaErrorInvalidValue;
}

// Whether K/V bases allow Load4's vector loads.
bool CacheAligned(const PagedAttentionArgs& a) {
  const uintptr_t bytes = static_cast<uintptr_t>(4 * ElemSize(a.cache_type));
  return (reinterpret_cast<uintptr_t>(a.k_cache) | reinterpret_cast<uintptr_t>(a.v_cache)) % bytes == 0;
}

#define TESSERA_ATTN_SWITCH_E(CASE) \
  switch (a.head_dim / 32) {        \
    CASE(1)                         \
    CASE(2)                         \
    CASE(3)                         \
    CASE(4)                         \
    CASE(5)                         \
    CASE(6)                         \
    CASE(7)                         \
    CASE(8)                         \
    default: return cudaErrorInvalidValue; \
  }

template <typename T>
cudaError_t LaunchDecodeSplits(const PagedAttentionArgs& a, int64_t splits, float2* ml, float* po,
                               cudaStream_t stream) {
  const bool aligned = CacheAligned(a);
  const dim3 grid(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>(a.num_kv_heads),
                  static_cast<unsigned>(splits));
#define TESSERA_ATTN_DECODE(e)                                                                    \
  case e:                                                                                         \
    TESSERA_LAUNCH(grid, kThreads, 0, stream, DecodeSplitKernel<T, e>)(a, splits, aligned, ml, po); \
    break;
  TESSERA_ATTN_SWITCH_E(TESSERA_ATTN_DECODE)
#undef TESSERA_ATTN_DECODE
  return cudaGetLastError();
}

template <typename T>
cudaError_t LaunchPrefill(const PagedAttentionArgs& a, const PrefillTile* tiles, int64_t num_tiles,
                          cudaStream_t stream) {
  const bool aligned = CacheAligned(a);
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(a.num_kv_heads));
#define TESSERA_ATTN_PREFILL(e)                                                                        \
  case e:                                                                                              \
    TESSERA_LAUNCH(grid, kThreads, PrefillShape<e>::kSmemBytes, stream, PrefillKernel<T, e>)(a, tiles, aligned); \
    break;
  TESSERA_ATTN_SWITCH_E(TESSERA_ATTN_PREFILL)
#undef TESSERA_ATTN_PREFILL
  return cudaGetLastError();
}

}  // namespace

int64_t PagedAttentionWorkspaceBytes(int64_t num_tokens, int64_t num_q_heads, int64_t head_dim,
                                     int64_t max_context) {
  const int64_t parts = num_tokens * num_q_heads * NumSplits(max_context);
  if (parts <= 0 || head_dim <= 0) return 0;
  return MlBytes(parts) + parts * head_dim * 4;
}

cudaError_t PagedAttentionDecode(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (a.num_tokens <= 0) return cudaSuccess;
  if (cudaError_t err = CheckArgs(a); err != cudaSuccess) return err;
  const int64_t splits = NumSplits(a.max_context);
  if (splits > 65535) return cudaErrorInvalidValue;
  float2* ml = nullptr;
  float* po = nullptr;
  if (splits > 0) {
    const int64_t need = PagedAttentionWorkspaceBytes(a.num_tokens, a.num_q_heads, a.head_dim, a.max_context);
    if (a.workspace == nullptr || a.workspace_bytes < need) return cudaErrorInvalidValue;
    ml = static_cast<float2*>(a.workspace);
    po = reinterpret_cast<float*>(static_cast<char*>(a.workspace) + MlBytes(a.num_tokens * a.num_q_heads * splits));
    cudaError_t err = cudaSuccess;
    switch (a.cache_type) {
      case ElemType::kF32: err = LaunchDecodeSplits<float>(a, splits, ml, po, stream); break;
      case ElemType::kF16: err = LaunchDecodeSplits<__half>(a, splits, ml, po, stream); break;
      default: err = LaunchDecodeSplits<__nv_bfloat16>(a, splits, ml, po, stream); break;
    }
    if (err != cudaSuccess) return err;
  }
  const dim3 grid(static_cast<unsigned>(a.num_tokens),
                  static_cast<unsigned>((a.num_q_heads * a.head_dim + kCombineThreads - 1) / kCombineThreads));
  TESSERA_LAUNCH(grid, kCombineThreads, 0, stream, CombineKernel)(
      a.positions, a.sliding_window, a.num_q_heads, a.head_dim, splits, ml, po, a.out);
  return cudaGetLastError();
}

cudaError_t PagedAttentionPrefill(const PagedAttentionArgs& a, const PrefillTile* tiles, int64_t num_tiles,
                                  cudaStream_t stream) {
  if (num_tiles <= 0 || a.num_tokens <= 0) return cudaSuccess;
  if (cudaError_t err = CheckArgs(a); err != cudaSuccess) return err;
  if (num_tiles > INT32_MAX) return cudaErrorInvalidValue;
  switch (a.cache_type) {
    case ElemType::kF32: return LaunchPrefill<float>(a, tiles, num_tiles, stream);
    case ElemType::kF16: return LaunchPrefill<__half>(a, tiles, num_tiles, stream);
    default: return LaunchPrefill<__nv_bfloat16>(a, tiles, num_tiles, stream);
  }
}

}  // namespace tessera::kernels::cuda
