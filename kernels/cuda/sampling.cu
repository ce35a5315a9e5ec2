#include "kernels/cuda/sampling.cuh"

namespace tessera::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;
constexpr int kNoIndex = 0x7fffffff;
constexpr float kGreedyTemperature = 1e-5f;  // engine/sampling.cc
constexpr int kProbes = 15;                  // keys probed per pass of the top_p searches
constexpr int kParts = 16;                   // thread groups in the mass reduction
static_assert(kProbes * kParts <= kThreads && kThreads % kParts == 0, "MassesAbove layout");

// Monotone map float -> uint32 (a < b as floats <=> key(a) < key(b), -0 < +0).
__device__ __forceinline__ uint32_t OrderedKey(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float KeyToFloat(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// engine/sampling.cc's CounterUniform, bit for bit (integer ops and an exact
// 53-bit conversion).
__device__ __forceinline__ uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
__device__ __forceinline__ double DeviceCounterUniform(uint64_t seed, uint64_t stream, uint64_t counter) {
  uint64_t h = SplitMix64(seed);
  h = SplitMix64(h ^ (stream * 0xd1b54a32d192ed03ULL));
  h = SplitMix64(h ^ (counter * 0xabc98388fb8fac03ULL));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

// Block reductions: warp butterfly, then warps in index order; every thread
// gets the result. `red` is __shared__ [kWarps]; all threads must call.
template <typename T>  // double or int
__device__ __forceinline__ T BlockSum(T v, T* red) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFull, v, off);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  T s = 0;
  for (int w = 0; w < kWarps; ++w) s += red[w];
  __syncthreads();
  return s;
}
// Max ignoring NaN (fmaxf), like the host's std::max(mx, v) from -inf.
__device__ __forceinline__ float BlockMax(float v, float* red) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, off));
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, red[w]);
  __syncthreads();
  return m;
}

// Argmax with the host's rule: the lowest index among the maxima, NaN never
// wins, 0 when nothing beats -inf. (v, i) is the caller's candidate (i ==
// kNoIndex: none); the order is total, so the result is independent of the tree.
__device__ __forceinline__ int BlockArgmax(float v, int i, float* redf, int* redi) {
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(kFull, v, off);
    const int oi = __shfl_xor_sync(kFull, i, off);
    if (ov > v || (ov == v && oi < i)) {
      v = ov;
      i = oi;
    }
  }
  if ((threadIdx.x & 31) == 0) {
    redf[threadIdx.x >> 5] = v;
    redi[threadIdx.x >> 5] = i;
  }
  __syncthreads();
  float bv = -INFINITY;
  int bi = kNoIndex;
  for (int w = 0; w < kWarps; ++w) {
    if (redf[w] > bv || (redf[w] == bv && redi[w] < bi)) {
      bv = redf[w];
      bi = redi[w];
    }
  }
  __syncthreads();
  return bi == kNoIndex ? 0 : bi;
}

// This thread's candidate for the argmax of row[0, n).
__device__ __forceinline__ void ThreadArgmax(const float* row, int n, float* bv, int* bi) {
  *bv = -INFINITY;
  *bi = kNoIndex;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float x = row[i];
    if (x > *bv) {
      *bv = x;
      *bi = i;
    }
  }
}

__global__ void ArgmaxRowsKernel(const float* __restrict__ logits, int vocab, int32_t* __restrict__ out) {
  __shared__ float redf[kWarps];
  __shared__ int redi[kWarps];
  const float* row = logits + static_cast<size_t>(blockIdx.x) * vocab;
  float bv;
  int bi;
  ThreadArgmax(row, vocab, &bv, &bi);
  const int best = BlockArgmax(bv, bi, redf, redi);
  if (threadIdx.x == 0) out[blockIdx.x] = best;
}

__global__ void LogSumExpRowsKernel(const float* __restrict__ logits, int vocab, double* __restrict__ out) {
  __shared__ float redf[kWarps];
  __shared__ double redd[kWarps];
  const float* row = logits + static_cast<size_t>(blockIdx.x) * vocab;
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += kThreads) mx = fmaxf(mx, row[i]);
  mx = BlockMax(mx, redf);
  if (mx == INFINITY || mx == -INFINITY) {
    if (threadIdx.x == 0) out[blockIdx.x] = mx;
    return;
  }
  double sum = 0.0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) sum += exp(static_cast<double>(row[i]) - mx);
  sum = BlockSum(sum, redd);
  if (threadIdx.x == 0) out[blockIdx.x] = mx + log(sum);
}

// The processed row in the workspace and which of its tokens are still kept:
// key(w) > lo_key, or key(w) == lo_key and index < cut (top_p may cut a tie
// group in index order). Pruned tokens hold -inf, whose key is below lo_key.
struct RowState {
  const float* w;
  int vocab;
  double mx;  // max of w after temperature (finite)
  uint32_t lo_key;
  int cut;
  __device__ bool Kept(uint32_t key, int i) const { return key > lo_key || (key == lo_key && i < cut); }
  // Unnormalised weight, exactly as the host: exp(double(w) - max).
  __device__ double Weight(float v) const { return exp(static_cast<double>(v) - mx); }
};

// Masses of kept tokens above N probe keys (ascending): out[j] = sum of
// weights with key > probe[j], to every thread. Each thread sums its strided
// tokens in index order, then fixed groups of threads in order, then the
// groups in order: the value for a key never depends on N or on the other
// probes, so masses from different calls are comparable bit for bit.
// red: __shared__ [kProbes * kThreads], part: __shared__ [kProbes * kParts].
template <int N>
__device__ __forceinline__ void MassesAbove(const RowState& s, const uint32_t* probe, double* out, double* red,
                                            double* part) {
  double acc[N];
#pragma unroll
  for (int j = 0; j < N; ++j) acc[j] = 0.0;
  for (int i = threadIdx.x; i < s.vocab; i += kThreads) {
    const float v = s.w[i];
    const uint32_t key = OrderedKey(v);
    if (key <= probe[0] || !s.Kept(key, i)) continue;
    const double e = s.Weight(v);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (key > probe[j]) acc[j] += e;
    }
  }
#pragma unroll
  for (int j = 0; j < N; ++j) red[j * kThreads + threadIdx.x] = acc[j];
  __syncthreads();
  if (threadIdx.x < N * kParts) {
    const int j = threadIdx.x / kParts;
    const double* r = red + j * kThreads + (threadIdx.x % kParts) * (kThreads / kParts);
    double t = 0.0;
    for (int k = 0; k < kThreads / kParts; ++k) t += r[k];
    part[threadIdx.x] = t;
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < N; ++j) {
    double t = 0.0;
    for (int g = 0; g < kParts; ++g) t += part[j * kParts + g];
    out[j] = t;
  }
  __syncthreads();
}

__device__ __forceinline__ double MassAbove(const RowState& s, uint32_t k, double* red, double* part) {
  double m;
  MassesAbove<1>(s, &k, &m, red, part);
  return m;
}

// Number of kept tokens whose key == k.
__device__ int CountAt(const RowState& s, uint32_t k, int* redi) {
  int c = 0;
  for (int i = threadIdx.x; i < s.vocab; i += kThreads) {
    const uint32_t key = OrderedKey(s.w[i]);
    if (key == k && s.Kept(key, i)) ++c;
  }
  return BlockSum(c, redi);
}

// Index of the rank-th (0-based) kept token with key == k, in index order;
// -1 if there are not that many. Threads own contiguous chunks; `scan` is
// __shared__ [kThreads + 1], `bcast` __shared__ [1].
__device__ int NthAt(const RowState& s, uint32_t k, int rank, int* scan, int* bcast) {
  const int chunk = (s.vocab + kThreads - 1) / kThreads;
  const int begin = min(s.vocab, static_cast<int>(threadIdx.x) * chunk);
  const int end = min(s.vocab, begin + chunk);
  int c = 0;
  for (int i = begin; i < end; ++i) {
    const uint32_t key = OrderedKey(s.w[i]);
    if (key == k && s.Kept(key, i)) ++c;
  }
  scan[threadIdx.x] = c;
  if (threadIdx.x == 0) bcast[0] = -1;
  __syncthreads();
  if (threadIdx.x == 0) {
    int pre = 0;
    for (int t = 0; t < kThreads; ++t) {
      const int n = scan[t];
      scan[t] = pre;
      pre += n;
    }
    scan[kThreads] = pre;
  }
  __syncthreads();
  int r = rank - scan[threadIdx.x];
  if (r >= 0 && rank < scan[threadIdx.x + 1]) {
    for (int i = begin; i < end; ++i) {
      const uint32_t key = OrderedKey(s.w[i]);
      if (key == k && s.Kept(key, i) && r-- == 0) {
        bcast[0] = i;
        break;
      }
    }
  }
  __syncthreads();
  const int result = bcast[0];
  __syncthreads();
  return result;
}

// Smallest key k in [lo, hi] with MassAbove(k) <= limit (strict: < limit), or
// hi when none below qualifies. MassAbove is non-increasing in k; each pass
// probes kProbes keys, so 32 bits take 8 passes.
__device__ uint32_t SearchMass(const RowState& s, uint32_t lo, uint32_t hi, double limit, bool strict, double* red,
                               double* part) {
  while (lo < hi) {
    uint32_t probe[kProbes];
    const uint64_t span = static_cast<uint64_t>(hi) - lo;
#pragma unroll
    for (int j = 0; j < kProbes; ++j) probe[j] = lo + static_cast<uint32_t>(span * (j + 1) / (kProbes + 1));
    double m[kProbes];
    MassesAbove<kProbes>(s, probe, m, red, part);
    int first = kProbes;
#pragma unroll
    for (int j = kProbes - 1; j >= 0; --j) {
      if (strict ? m[j] < limit : m[j] <= limit) first = j;
    }
    if (first == kProbes) {
      lo = probe[kProbes - 1] + 1;
    } else {
      hi = probe[first];
      if (first > 0) lo = probe[first - 1] + 1;
    }
  }
  return hi;
}

__global__ void SampleRowsKernel(const float* __restrict__ logits, int vocab, const SampleRowParams* params,
                                 TokenLists prompt, TokenLists output, LogitEdits edits, float* work_all,
                                 int* counts_all, int32_t* out) {
  __shared__ float redf[kWarps];
  __shared__ int redi[kWarps];
  __shared__ int hist[256];
  __shared__ double dscan[kThreads + 1];
  __shared__ double mred[kProbes * kThreads];
  __shared__ double mpart[kProbes * kParts];
  __shared__ int iscan[kThreads + 1];
  __shared__ int bcast[2];

  const int row = blockIdx.x;
  const int tid = threadIdx.x;
  const float* lg = logits + static_cast<size_t>(row) * vocab;
  float* w = work_all + static_cast<size_t>(row) * vocab;
  int* cnt = counts_all + static_cast<size_t>(row) * vocab;
  const SampleRowParams p = params[row];
  const bool rep = p.repetition_penalty != 1.0f;
  const bool pen = rep || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;

  // 1. Copy the row; cnt[t]: occurrences in the output, -1: prompt only.
  for (int i = tid; i < vocab; i += kThreads) {
    w[i] = lg[i];
    if (pen) cnt[i] = 0;
  }
  __syncthreads();
  // 2. Bans and biases in list order (one thread: duplicates add in order).
  if (edits.offsets != nullptr && tid == 0) {
    for (int j = edits.offsets[row]; j < edits.offsets[row + 1]; ++j) {
      const int t = edits.tokens[j];
      if (t < 0 || t >= vocab) continue;
      const float b = edits.values[j];
      if (b == -INFINITY) {
        w[t] = -INFINITY;
      } else {
        w[t] += b;
      }
    }
  }
  if (pen && output.offsets != nullptr) {
    for (int j = output.offsets[row] + tid; j < output.offsets[row + 1]; j += kThreads) {
      const int t = output.tokens[j];
      if (t >= 0 && t < vocab) atomicAdd(&cnt[t], 1);
    }
  }
  __syncthreads();
  if (rep && prompt.offsets != nullptr) {
    // Racing writers all store -1 over a 0; counts are final after the barrier above.
    for (int j = prompt.offsets[row] + tid; j < prompt.offsets[row + 1]; j += kThreads) {
      const int t = prompt.tokens[j];
      if (t >= 0 && t < vocab && cnt[t] == 0) cnt[t] = -1;
    }
  }
  __syncthreads();

  // 3. Penalties (each penalised token once), then greedy or temperature.
  const bool greedy = p.temperature < kGreedyTemperature;
  float bv = -INFINITY;
  int bi = kNoIndex;
  float mx = -INFINITY;
  for (int i = tid; i < vocab; i += kThreads) {
    float v = w[i];
    if (pen) {
      const int c = cnt[i];
      if (c != 0) {
        if (rep) v = v > 0.f ? v / p.repetition_penalty : v * p.repetition_penalty;
        // The product is rounded to float on its own (as on the host): no fused multiply-add.
        if (c > 0) {
          v -= static_cast<float>(static_cast<double>(p.frequency_penalty) * static_cast<double>(c)) +
               p.presence_penalty;
        }
      }
    }
    if (greedy) {
      if (v > bv) {
        bv = v;
        bi = i;
      }
    } else {
      v = v / p.temperature;
      w[i] = v;
      mx = fmaxf(mx, v);
    }
  }
  if (greedy) {
    const int best = BlockArgmax(bv, bi, redf, redi);
    if (tid == 0) out[row] = best;
    return;
  }
  mx = BlockMax(mx, redf);
  if (mx == INFINITY || mx == -INFINITY) {  // everything masked (or +inf): the raw argmax, as the host
    ThreadArgmax(lg, vocab, &bv, &bi);
    const int best = BlockArgmax(bv, bi, redf, redi);
    if (tid == 0) out[row] = best;
    return;
  }

  // 4. min_p: keep weight > 0 and >= min_p (weight of the max is 1); the rest become -inf.
  RowState s{w, vocab, static_cast<double>(mx), OrderedKey(-INFINITY) + 1, 0};
  const double min_p = p.min_p;
  int kept = 0;
  for (int i = tid; i < vocab; i += kThreads) {
    const double e = s.Weight(w[i]);
    if (e > 0.0 && e >= min_p) {
      ++kept;
    } else {
      w[i] = -INFINITY;
    }
  }
  kept = BlockSum(kept, redi);
  if (kept == 0) {  // min_p > 1 or NaN (the host has no answer): the raw argmax
    ThreadArgmax(lg, vocab, &bv, &bi);
    const int best = BlockArgmax(bv, bi, redf, redi);
    if (tid == 0) out[row] = best;
    return;
  }

  // 5. top_k: radix-select the key of the k-th largest kept value; keep
  // everything >= it (ties with the k-th all stay, as the host).
  if (p.top_k > 0 && p.top_k < kept) {
    uint32_t prefix = 0, mask = 0;
    int k = p.top_k;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += kThreads) hist[b] = 0;
      __syncthreads();
      for (int i = tid; i < vocab; i += kThreads) {
        const uint32_t key = OrderedKey(w[i]);
        if (key >= s.lo_key && (key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
      }
      __syncthreads();
      if (tid == 0) {
        int b = 255;
        for (; b > 0 && hist[b] < k; --b) k -= hist[b];
        bcast[0] = b;
        bcast[1] = k;
      }
      __syncthreads();
      prefix |= static_cast<uint32_t>(bcast[0]) << shift;
      mask |= 255u << shift;
      k = bcast[1];
      __syncthreads();
    }
    s.lo_key = prefix;
  }
  s.cut = vocab;
  const uint32_t top_key = OrderedKey(mx);

  const double u = DeviceCounterUniform(p.seed, static_cast<uint64_t>(p.choice_index),
                                        static_cast<uint64_t>(p.output_position));
  int token;
  if (p.top_p < 1.0f) {
    // 6. top_p in (weight desc, index asc) order: keep while the mass before a
    // token is < top_p * total. Level v: the lowest key whose mass strictly
    // above is < the limit; its ties are kept in index order one by one.
    const double total = MassAbove(s, s.lo_key - 1, mred, mpart);
    const double limit = static_cast<double>(p.top_p) * total;
    const uint32_t level = SearchMass(s, s.lo_key, top_key, limit, /*strict=*/true, mred, mpart);
    const double above_mass = MassAbove(s, level, mred, mpart);
    int above = 0, ties = 0;
    for (int i = tid; i < vocab; i += kThreads) {
      const uint32_t key = OrderedKey(w[i]);
      if (key > level && s.Kept(key, i)) ++above;
      if (key == level && s.Kept(key, i)) ++ties;
    }
    above = BlockSum(above, redi);
    ties = BlockSum(ties, redi);
    if (tid == 0) {
      const double e = s.Weight(KeyToFloat(level));
      double cum = above_mass;
      int m = 0;
      while (m < ties && !(above + m > 0 && cum >= limit)) {
        ++m;
        cum += e;
      }
      bcast[0] = m;
    }
    __syncthreads();
    const int keep_ties = bcast[0];
    __syncthreads();
    const int cut = keep_ties < ties ? NthAt(s, level, keep_ties, iscan, bcast) : vocab;
    s.lo_key = level;
    s.cut = cut;

    // 7. Draw in the same order: the level holding the u-quantile of the kept
    // mass, then the tie at that offset in index order.
    const double kept_mass = MassAbove(s, s.lo_key - 1, mred, mpart);
    double target = u * kept_mass;
    if (target >= kept_mass) target = kept_mass * (1.0 - 0x1.0p-52);
    const uint32_t at = SearchMass(s, s.lo_key, top_key, target, /*strict=*/false, mred, mpart);
    const double at_above = MassAbove(s, at, mred, mpart);
    const int at_count = CountAt(s, at, redi);
    const double q = (target - at_above) / s.Weight(KeyToFloat(at));
    const int rank = q >= static_cast<double>(at_count - 1) ? at_count - 1 : (q > 0.0 ? static_cast<int>(q) : 0);
    token = NthAt(s, at, rank, iscan, bcast);
  } else {
    // 6'. Draw in index order: threads own contiguous chunks; an exclusive scan
    // of the chunk masses finds the chunk, whose owner walks it.
    const int chunk = (vocab + kThreads - 1) / kThreads;
    const int begin = min(vocab, tid * chunk);
    const int end = min(vocab, begin + chunk);
    double m = 0.0;
    for (int i = begin; i < end; ++i) {
      const float v = w[i];
      if (s.Kept(OrderedKey(v), i)) m += s.Weight(v);
    }
    dscan[tid] = m;
    __syncthreads();
    if (tid == 0) {
      double pre = 0.0;
      for (int t = 0; t < kThreads; ++t) {
        const double x = dscan[t];
        dscan[t] = pre;
        pre += x;
      }
      dscan[kThreads] = pre;
      bcast[0] = -1;
    }
    __syncthreads();
    const double kept_mass = dscan[kThreads];
    double target = u * kept_mass;
    if (target >= kept_mass) target = kept_mass * (1.0 - 0x1.0p-52);
    if (dscan[tid] <= target && target < dscan[tid + 1]) {
      double cum = dscan[tid];
      int last = -1;
      for (int i = begin; i < end; ++i) {
        const float v = w[i];
        if (!s.Kept(OrderedKey(v), i)) continue;
        cum += s.Weight(v);
        last = i;
        if (target < cum) break;
      }
      bcast[0] = last;
    }
    __syncthreads();
    token = bcast[0];
  }
  if (tid == 0) out[row] = token;
}

}  // namespace

size_t SampleRowsWorkspaceBytes(int64_t rows, int64_t vocab) {
  if (rows <= 0 || vocab <= 0) return 0;
  const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(vocab);
  const size_t work = (n * sizeof(float) + 255) / 256 * 256;
  return work + n * sizeof(int);
}

cudaError_t ArgmaxRows(const float* logits, int64_t rows, int64_t vocab, int32_t* out, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (vocab <= 0 || vocab > (int64_t{1} << 30)) return cudaErrorInvalidValue;
  TESSERA_LAUNCH(static_cast<unsigned>(rows), kThreads, 0, stream, ArgmaxRowsKernel)(
      logits, static_cast<int>(vocab), out);
  return cudaGetLastError();
}

cudaError_t SampleRows(const float* logits, int64_t rows, int64_t vocab, const SampleRowParams* params,
                       TokenLists prompt, TokenLists output, LogitEdits edits, void* workspace,
                       size_t workspace_bytes, int32_t* out, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (vocab <= 0 || vocab > (int64_t{1} << 30)) return cudaErrorInvalidValue;
  if (workspace == nullptr || workspace_bytes < SampleRowsWorkspaceBytes(rows, vocab)) {
    return cudaErrorInvalidValue;
  }
  const size_t n = static_cast<size_t>(rows) * static_cast<size_t>(vocab);
  float* work = static_cast<float*>(workspace);
  int* counts = reinterpret_cast<int*>(static_cast<char*>(workspace) + (n * sizeof(float) + 255) / 256 * 256);
  TESSERA_LAUNCH(static_cast<unsigned>(rows), kThreads, 0, stream, SampleRowsKernel)(
      logits, static_cast<int>(vocab), params, prompt, output, edits, work, counts, out);
  return cudaGetLastError();
}

cudaError_t LogSumExpRows(const float* logits, int64_t rows, int64_t vocab, double* out, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (vocab <= 0 || vocab > (int64_t{1} << 30)) return cudaErrorInvalidValue;
  TESSERA_LAUNCH(static_cast<unsigned>(rows), kThreads, 0, stream, LogSumExpRowsKernel)(
      logits, static_cast<int>(vocab), out);
  return cudaGetLastError();
}

}  // namespace tessera::kernels::cuda
