// Microbenchmarks of the CPU kernels at Qwen2-0.5B shapes (hidden 896, FFN 4864,
// vocab 151936, 14 q heads / 2 kv heads of 64), plus the two limits every figure is
// a ratio to, measured in the same run: streaming read bandwidth (decode is bound
// by it) and the AVX2 FMA peak (prefill GEMMs approach it).
//
//   build/bench/kernels_bench --benchmark_filter='Linear/bf16/896x9728'
//
// TESSERA_BENCH_HOT_WEIGHTS=1 keeps one copy of the weights (cache-resident for the
// small shapes): separates a kernel's compute rate from DRAM bandwidth.
//
// Counters: bytes_per_second = weight+activation bytes per second; FLOPS = 2*M*N*K/s
// (for quantized weights too: int8 multiply-adds count as 2 ops, like Limit/Int8Peak
// and Limit/Int8VnniPeak). Quantized Linear runs on the dispatched path, named in
// the label (vnni / avx2 / scalar); TESSERA_CPU_NO_AVX512=1 selects AVX2 instead
// of VNNI, TESSERA_CPU_SCALAR=1 the scalar kernels.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/quant.h"
#include "common/thread_pool.h"
#include "kernels/cpu/gdn.h"
#include "kernels/cpu/ops.h"

namespace tessera::kernels::cpu {
namespace {

ThreadPool* Pool(int threads) {
  static ThreadPool* pools[3] = {nullptr, new ThreadPool(1), new ThreadPool(2)};
  return pools[threads];
}

std::vector<float> RandomVec(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Weights of one (K, N, dtype), kept across cases (the lm_head is 272 MB in bf16), in
// enough copies (>= 128 MB together) that cycling through them defeats the 32 MB L3,
// as decoding a whole model does: each call streams its weights from DRAM.
struct WeightSet {
  int64_t k = -1, n = -1;
  DType type = DType::kF32;
  int64_t bytes = 0;  // one copy
  std::vector<uint8_t> data;
  int64_t copies = 0;
};

const WeightSet& Weights(int64_t k, int64_t n, DType type) {
  static WeightSet ws;
  if (ws.k == k && ws.n == n && ws.type == type) return ws;
  ws = WeightSet{k, n, type, n * DTypeRowBytes(type, k), {}, 0};
  ws.copies = std::max<int64_t>(1, ((int64_t{128} << 20) + ws.bytes - 1) / ws.bytes);
  if (std::getenv("TESSERA_BENCH_HOT_WEIGHTS") != nullptr) ws.copies = 1;  // cache-resident
  ws.data.resize(ws.bytes * ws.copies);
  // Rows drawn from one random pool (the lm_head would need 0.5 GB of f32 otherwise).
  const int64_t pool = (int64_t{1} << 20) + 7;
  const auto vals = RandomVec(pool + k, 7);
  const int64_t rb = DTypeRowBytes(type, k);
  for (int64_t j = 0; j < n; ++j) {
    const float* src = vals.data() + (j * 7919) % pool;
    uint8_t* dst = ws.data.data() + j * rb;
    if (IsQuantized(type)) {
      QuantizeRow(src, k, type, dst);
    } else if (type == DType::kF32) {
      std::memcpy(dst, src, 4 * k);
    } else {
      for (int64_t i = 0; i < k; ++i) {
        const uint16_t h = type == DType::kBF16 ? F32ToBf16(src[i]) : F32ToF16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
    }
  }
  for (int64_t c = 1; c < ws.copies; ++c)
    std::memcpy(ws.data.data() + c * ws.bytes, ws.data.data(), ws.bytes);
  return ws;
}

void BM_Linear(benchmark::State& state, int64_t k, int64_t n, DType type) {
  const int64_t m = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const WeightSet& w = Weights(k, n, type);
  const auto x = RandomVec(m * k, 3);
  std::vector<float> y(m * n);
  if (IsQuantized(type)) state.SetLabel(QuantLinearPath(type, m));
  int64_t copy = 0;
  for (auto _ : state) {
    Linear(x.data(), m, k, w.data.data() + copy * w.bytes, type, n, nullptr, y.data(), n,
           Pool(threads));
    copy = copy + 1 == w.copies ? 0 : copy + 1;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(w.bytes) + 4.0 * m * (k + n);
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
  state.counters["FLOPS"] = benchmark::Counter(2.0 * m * n * k * state.iterations(),
                                               benchmark::Counter::kIsRate);
}

void BM_PagedAttentionDecode(benchmark::State& state) {
  const int64_t ctx = state.range(0), seqs = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  const int64_t q_heads = 14, kv_heads = 2, hd = 64, bs = 16;
  const int64_t blocks_per_seq = (ctx + bs - 1) / bs;
  const int64_t num_blocks = blocks_per_seq * seqs;
  const auto k_cache = RandomVec(num_blocks * bs * kv_heads * hd, 1);
  const auto v_cache = RandomVec(num_blocks * bs * kv_heads * hd, 2);
  const auto q = RandomVec(seqs * q_heads * hd, 3);
  std::vector<int32_t> tables(num_blocks), positions(seqs), token_to_seq(seqs);
  std::vector<int32_t> ids(num_blocks);
  for (int64_t i = 0; i < num_blocks; ++i) ids[i] = static_cast<int32_t>(i);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(4));
  for (int64_t i = 0; i < num_blocks; ++i) tables[i] = ids[i];
  for (int64_t s = 0; s < seqs; ++s) {
    positions[s] = static_cast<int32_t>(ctx - 1);
    token_to_seq[s] = static_cast<int32_t>(s);
  }
  std::vector<float> out(seqs * q_heads * hd);
  PagedAttentionArgs a;
  a.q = q.data();
  a.q_stride = q_heads * hd;
  a.k_cache = k_cache.data();
  a.v_cache = v_cache.data();
  a.num_tokens = seqs;
  a.num_q_heads = q_heads;
  a.num_kv_heads = kv_heads;
  a.head_dim = hd;
  a.block_size = bs;
  a.positions = positions.data();
  a.token_to_seq = token_to_seq.data();
  a.block_tables = tables.data();
  a.max_blocks_per_seq = blocks_per_seq;
  a.scale = 0.125f;
  a.out = out.data();
  for (auto _ : state) {
    PagedAttention(a, Pool(threads));
    benchmark::DoNotOptimize(out.data());
  }
  // K and V of every kv head are read once (per group of 7 q heads).
  const double bytes = 2.0 * seqs * ctx * kv_heads * hd * 4;
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
  state.counters["FLOPS"] = benchmark::Counter(4.0 * seqs * q_heads * ctx * hd * state.iterations(),
                                               benchmark::Counter::kIsRate);
}

// Gated DeltaNet core (GC form) at Qwen3.5-0.8B's linear-layer shape (16 k and v heads
// of 128, conv 4): `rows` positions per call for each of `seqs` sequences. Decode calls
// (rows 1) walk the positions on, so one call in 16 also pays the chunk-end state update.
// FLOPS counts 6·dk·dv per row and v-head (Sᵀk̂, Sᵀq̂ and the amortised update);
// bytes_per_second the state each row reads (dk·dv f32 per v-head).
void BM_GdnCore(benchmark::State& state) {
  const int64_t rows = state.range(0), seqs = state.range(1);
  const int threads = static_cast<int>(state.range(2));
  GdnDims d;
  d.k_heads = 16;
  d.v_heads = 16;
  d.k_dim = 128;
  d.v_dim = 128;
  d.conv_kernel = 4;
  const auto qkv = RandomVec(seqs * rows * d.conv_channels(), 1);
  const auto a = RandomVec(seqs * rows * d.v_heads, 2), b = RandomVec(seqs * rows * d.v_heads, 3);
  const auto a_log = RandomVec(d.v_heads, 4), dt_bias = RandomVec(d.v_heads, 5);
  std::vector<float> states(seqs * d.state_floats(), 0.0f), open(seqs * d.open_floats(), 0.0f);
  std::vector<float> out(seqs * rows * d.v_heads * d.v_dim);
  std::vector<GdnSeq> batch(seqs);
  GdnScratch scratch;
  const GdnParams p{a_log.data(), dt_bias.data()};
  int64_t pos = 0;
  for (auto _ : state) {
    for (int64_t s = 0; s < seqs; ++s) {
      GdnSeq& q = batch[s];
      q.start = rows == 1 ? pos : 0;
      q.rows = rows;
      q.qkv = qkv.data() + s * rows * d.conv_channels();
      q.a = a.data() + s * rows * d.v_heads;
      q.b = b.data() + s * rows * d.v_heads;
      q.state = states.data() + s * d.state_floats();
      q.open = open.data() + s * d.open_floats();
      q.out = out.data() + s * rows * d.v_heads * d.v_dim;
    }
    GdnCore(d, p, batch.data(), seqs, &scratch, Pool(threads));
    benchmark::DoNotOptimize(out.data());
    ++pos;
  }
  const double row_heads = static_cast<double>(seqs) * rows * d.v_heads * state.iterations();
  state.SetBytesProcessed(static_cast<int64_t>(row_heads * d.k_dim * d.v_dim * 4));
  state.counters["FLOPS"] = benchmark::Counter(6.0 * d.k_dim * d.v_dim * row_heads, benchmark::Counter::kIsRate);
}

// --- Limits measured in the same run.

// Sum of floats, 4 x 8 lanes: streams memory as fast as a core can.
__attribute__((target("avx2"))) float ReadSum(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return out[0];
}

// Streaming read of a 1 GiB buffer (far beyond the caches), split over `threads`.
void BM_ReadBandwidth(benchmark::State& state) {
  if (!UseAvx2()) {
    state.SkipWithError("no AVX2");
    return;
  }
  const int threads = static_cast<int>(state.range(0));
  const int64_t n = int64_t{1} << 28;  // floats
  static std::vector<float> buf(n, 1.0f);
  for (auto _ : state) {
    std::vector<float> part(threads);
    Pool(threads)->ParallelFor(threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) part[t] = ReadSum(buf.data() + n / threads * t, n / threads);
    });
    benchmark::DoNotOptimize(part.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(4.0 * n * state.iterations()));
}

// 12 independent FMA chains per thread: the per-core AVX2 FMA throughput.
__attribute__((target("avx2,fma"))) float FmaLoop(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0];
}

void BM_FmaPeak(benchmark::State& state) {
  if (!UseAvx2()) {
    state.SkipWithError("no AVX2");
    return;
  }
  const int threads = static_cast<int>(state.range(0));
  const int64_t iters = 1 << 20;
  for (auto _ : state) {
    Pool(threads)->ParallelFor(threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) benchmark::DoNotOptimize(FmaLoop(iters));
    });
  }
  state.counters["FLOPS"] = benchmark::Counter(
      2.0 * 8 * 12 * iters * threads * state.iterations(), benchmark::Counter::kIsRate);
}

// The int8 dot instruction sequence (vpmaddubsw + vpmaddwd + vpaddd on 32 byte
// pairs), 5 independent chains held in named registers (arrays were kept on the
// stack by GCC: the loop then measured store forwarding): counted as 2 ops (multiply,
// add) per byte pair, i.e. 64 ops per sequence (counter FLOPS, though integer), so it
// compares with 2*M*N*K of a GEMM.
constexpr int kInt8Chains = 5;
__attribute__((target("avx2"))) int Int8Loop(int64_t iters) {
  const __m256i s = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
  __m256i v0 = _mm256_set1_epi8(1), v1 = _mm256_set1_epi8(2), v2 = _mm256_set1_epi8(3);
  __m256i v3 = _mm256_set1_epi8(4), v4 = _mm256_set1_epi8(5);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0;
  for (int64_t it = 0; it < iters; ++it) {
    // Opaque: keeps the (otherwise loop-invariant) multiplies inside the loop.
    asm volatile("" : "+x"(v0), "+x"(v1), "+x"(v2), "+x"(v3), "+x"(v4));
#define TESSERA_INT8_STEP(A, V) A = _mm256_add_epi32(A, _mm256_madd_epi16(_mm256_maddubs_epi16(V, s), ones))
    TESSERA_INT8_STEP(a0, v0);
    TESSERA_INT8_STEP(a1, v1);
    TESSERA_INT8_STEP(a2, v2);
    TESSERA_INT8_STEP(a3, v3);
    TESSERA_INT8_STEP(a4, v4);
#undef TESSERA_INT8_STEP
  }
  const __m256i t = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)), a4);
  return _mm256_extract_epi32(t, 0);
}

void BM_Int8Peak(benchmark::State& state) {
  if (!UseAvx2()) {
    state.SkipWithError("no AVX2");
    return;
  }
  const int threads = static_cast<int>(state.range(0));
  const int64_t iters = 1 << 20;
  for (auto _ : state) {
    Pool(threads)->ParallelFor(threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) benchmark::DoNotOptimize(Int8Loop(iters));
    });
  }
  state.counters["FLOPS"] = benchmark::Counter(2.0 * 32 * kInt8Chains * iters * threads * state.iterations(),
                                             benchmark::Counter::kIsRate);
}

// vpdpbusd (u8 x s8, 4 byte pairs into each int32 lane) on 256- or 512-bit vectors,
// 12 independent accumulator chains in named registers (each step depends on its
// accumulator, so nothing is loop-invariant): 2 ops per byte pair (64 per ymm, 128 per
// zmm instruction), comparable with Limit/Int8Peak and 2*M*N*K.
constexpr int kVnniChains = 12;
__attribute__((target("avx2"))) inline int Extract0(__m256i v) {
  return _mm_cvtsi128_si32(_mm256_castsi256_si128(v));
}
__attribute__((target("avx512f"))) inline int Extract0(__m512i v) {
  alignas(64) int32_t t[16];  // (the cast/extract intrinsics trip GCC 12's -Wuninitialized)
  _mm512_store_si512(t, v);
  return t[0];
}
#define TESSERA_VNNI_LOOP(NAME, V, SET1, ZERO, DPBUSD, ADD, EXTRACT0)              \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) int NAME(int64_t iters) { \
    const V s = SET1(3), v = SET1(7);                                              \
    /* distinct starts, or the compiler merges identical chains */                 \
    V a0 = ZERO(), a1 = SET1(1), a2 = SET1(2), a3 = SET1(3), a4 = SET1(4);         \
    V a5 = SET1(5), a6 = SET1(6), a7 = SET1(7), a8 = SET1(8), a9 = SET1(9);        \
    V a10 = SET1(10), a11 = SET1(11);                                              \
    for (int64_t it = 0; it < iters; ++it) {                                       \
      a0 = DPBUSD(a0, v, s);                                                       \
      a1 = DPBUSD(a1, v, s);                                                       \
      a2 = DPBUSD(a2, v, s);                                                       \
      a3 = DPBUSD(a3, v, s);                                                       \
      a4 = DPBUSD(a4, v, s);                                                       \
      a5 = DPBUSD(a5, v, s);                                                       \
      a6 = DPBUSD(a6, v, s);                                                       \
      a7 = DPBUSD(a7, v, s);                                                       \
      a8 = DPBUSD(a8, v, s);                                                       \
      a9 = DPBUSD(a9, v, s);                                                       \
      a10 = DPBUSD(a10, v, s);                                                     \
      a11 = DPBUSD(a11, v, s);                                                     \
    }                                                                              \
    const V t = ADD(ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7))), \
                    ADD(ADD(a8, a9), ADD(a10, a11)));                              \
    return EXTRACT0(t);                                                            \
  }
TESSERA_VNNI_LOOP(VnniLoop512, __m512i, _mm512_set1_epi8, _mm512_setzero_si512, _mm512_dpbusd_epi32,
                  _mm512_add_epi32, Extract0)
TESSERA_VNNI_LOOP(VnniLoop256, __m256i, _mm256_set1_epi8, _mm256_setzero_si256, _mm256_dpbusd_epi32,
                  _mm256_add_epi32, Extract0)
#undef TESSERA_VNNI_LOOP

void BM_Int8VnniPeak(benchmark::State& state) {
  if (!GetCpuFeatures().avx512vnni) {
    state.SkipWithError("no AVX-512 VNNI");
    return;
  }
  const int threads = static_cast<int>(state.range(0));
  const int bits = static_cast<int>(state.range(1));
  const int64_t iters = 1 << 20;
  for (auto _ : state) {
    Pool(threads)->ParallelFor(threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t)
        benchmark::DoNotOptimize(bits == 512 ? VnniLoop512(iters) : VnniLoop256(iters));
    });
  }
  state.counters["FLOPS"] = benchmark::Counter(2.0 * (bits / 8) * kVnniChains * iters * threads * state.iterations(),
                                               benchmark::Counter::kIsRate);
}

struct LinearShape {
  const char* name;
  int64_t k, n;
};

int RegisterAll() {
  const LinearShape shapes[] = {{"896x896", 896, 896},
                                {"896x9728", 896, 9728},    // gate+up fused
                                {"4864x896", 4864, 896},    // down
                                {"896x151936", 896, 151936}};  // lm_head
  // Shapes of the 0.5B model for the quantized types (and bf16 to compare with).
  const LinearShape qshapes[] = {{"896x896", 896, 896},
                                 {"896x4864", 896, 4864},
                                 {"4864x896", 4864, 896},
                                 {"896x151936", 896, 151936},
                                 {"4096x4096", 4096, 4096}};  // a 7-8B model's attention
  auto add = [](DType type, const LinearShape& s) {
    if (DTypeRowBytes(type, s.k) < 0) return;  // Q4_K needs K % 256 == 0 (not 896)
    const std::string name = std::string("Linear/") + std::string(DTypeName(type)) + "/" + s.name;
    auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_Linear, s.k, s.n, type);
    b->ArgNames({"M", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();
    for (int64_t m : {1, 2, 3, 4, 8, 16, 32, 512}) {
      if (s.n > 100000 && m > 32) continue;  // logits only at sampled positions
      for (int threads : {1, 2}) b->Args({m, threads});
    }
  };
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                     DType::kIQ4_NL, DType::kMXFP4}) {
    for (const auto& s : qshapes) add(type, s);
  }
  for (DType type : {DType::kBF16, DType::kF32}) {
    for (const auto& s : shapes) add(type, s);
  }
  // The 256-element types beside Q4_K on a 7B-sized square matrix.
  for (DType type : {DType::kQ4_K, DType::kQ6_K, DType::kQ5_K, DType::kIQ4_XS, DType::kQ3_K, DType::kQ2_K})
    add(type, {"4096x4096", 4096, 4096});
  // A Llama-3 1B-class lm_head (hidden 1024, vocab 128256): batch-1 decode's largest Linear.
  for (DType type : {DType::kQ4_K, DType::kQ6_K, DType::kQ5_K, DType::kIQ4_XS})
    add(type, {"1024x128256", 1024, 128256});
  add(DType::kBF16, qshapes[1]);
  benchmark::RegisterBenchmark("PagedAttentionDecode", BM_PagedAttentionDecode)
      ->ArgNames({"ctx", "seqs", "threads"})
      ->ArgsProduct({{512, 2048}, {1, 8}, {1, 2}})
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("GdnCore", BM_GdnCore)
      ->ArgNames({"rows", "seqs", "threads"})
      ->Args({1, 1, 1})->Args({1, 16, 1})->Args({1, 16, 2})->Args({512, 1, 1})->Args({512, 1, 2})
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("Limit/ReadBandwidth", BM_ReadBandwidth)
      ->ArgNames({"threads"})->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("Limit/Int8Peak", BM_Int8Peak)
      ->ArgNames({"threads"})->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("Limit/Int8VnniPeak", BM_Int8VnniPeak)
      ->ArgNames({"threads", "bits"})->ArgsProduct({{1, 2}, {256, 512}})
      ->Unit(benchmark::kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("Limit/FmaPeak", BM_FmaPeak)
      ->ArgNames({"threads"})->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
  return 0;
}

const int kRegistered = RegisterAll();

}  // namespace
}  // namespace tessera::kernels::cpu
