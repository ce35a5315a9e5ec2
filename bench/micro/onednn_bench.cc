// oneDNN (Debian libdnnl-dev) matmul against our Linear at Qwen2-0.5B shapes:
// is oneDNN worth adopting for large float GEMMs, and is it batch-invariant (docs/architecture.md, "Batch invariance")?
// Built only when CMake finds oneDNN (bench/CMakeLists.txt).
//
//   build/bench/onednn_bench --benchmark_min_time=0.2
//   build/bench/onednn_bench --benchmark_filter='^(Ours|Dnnl)/f32/896x4864'
//   build/bench/onednn_bench --benchmark_filter='Invariance'
//
// Cases, y[M,N] = x[M,K] W^T with W stored [N,K] row-major (our layout):
//   Ours/{f32,bf16,q8_0}: kernels::cpu::Linear (f32 activations; bf16 weights widened
//     to f32 for FMA; q8_0 quantizes x per 32-block and uses VNNI/AVX2 int8 dots).
//   Dnnl/f32:  f32 src, f32 weights, f32 dst.
//   Dnnl/bf16: bf16 src (converted before timing), bf16 weights, f32 dst.
//   Dnnl/s8:   u8 src (quantized before timing), s8 weights, f32 dst with one output
//     scale (per-tensor; coarser than q8_0's per-32-block scales, and x is not
//     quantized inside the timed call: both favour oneDNN).
//   Weights "plain" = memory format tag `ba` on dims {K,N}, i.e. our [N,K] bytes as is;
//   "packed" = format_tag::any, reordered to oneDNN's blocked layout before timing
//   (what an adopter would do once at model load).
// As in kernels_bench, each call reads a different copy of the weights (>= 128 MB of
// copies, beyond the L3), so small M streams weights from DRAM; TESSERA_BENCH_HOT_WEIGHTS=1
// keeps one copy. FLOPS = 2*M*N*K/s (int8 multiply-adds count as 2 ops).
// oneDNN's Debian build uses GNU OpenMP: omp_set_num_threads(threads) before each case.
// Run the Ours and Dnnl families in separate processes if in doubt: idle OpenMP workers
// spin for a while after a oneDNN call and take CPU from our pool on a 2-core machine.
//
// Invariance/<type>/<format>/<shape>: row r of y computed alone (M=1, 1 thread) versus
// inside M=16 and M=512 batches (1 and 2 threads), for rows 0..15. Counters: max abs
// difference and bitwise (1 when every compared value is bitwise equal). Ours is run
// too as the control (the design requires bitwise 0 for it); vs_ours (oneDNN against
// ours, M=1) shows the comparison does see summation-order differences.
//
// Measured 2026-11-21 (oneDNN 2.6.3, GNU OpenMP; AMD EPYC with AVX512_BF16/VNNI, 2 cores,
// shared: load 1.6-3.7), best of 7 runs, GFLOP/s at 1 thread, M=512, K x N = 896x4864:
// f32 ours 102 / dnnl 106 (plain) 112 (packed), AVX2 FMA peak 117; bf16 ours 104 / dnnl
// 208-218 (vdpbf16ps, but x rounded to bf16); q8_0 ours 316 / s8 dnnl 400-431 (per-tensor
// scales, not Q8_0). oneDNN rows were bitwise equal across M in {1,16,512} and 1-16
// threads here, which oneDNN does not promise (uxlfoundation/oneDNN#1443, #789).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <dnnl.hpp>

#include "bench/limits.h"
#include "common/dtype.h"
#include "common/quant.h"
#include "common/thread_pool.h"
#include "kernels/cpu/ops.h"

namespace tessera::kernels::cpu {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

enum class Kind { kF32, kBF16, kInt8 };
const char* KindName(Kind k) { return k == Kind::kF32 ? "f32" : k == Kind::kBF16 ? "bf16" : "s8"; }

ThreadPool* Pool(int threads) {
  static ThreadPool* pools[3] = {nullptr, new ThreadPool(1), new ThreadPool(2)};
  return pools[threads];
}

dnnl::engine& Engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

std::vector<float> RandomVec(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

int64_t Copies(int64_t bytes) {
  if (std::getenv("TESSERA_BENCH_HOT_WEIGHTS") != nullptr) return 1;
  return std::max<int64_t>(1, ((int64_t{128} << 20) + bytes - 1) / bytes);
}

// W [N,K] as f32, the same values for every case of a shape.
std::vector<float> WeightValues(int64_t k, int64_t n) { return RandomVec(n * k, 7); }

// Per-tensor int8 quantization scale of v (amax / 127).
float Int8Scale(const std::vector<float>& v) {
  float amax = 0;
  for (float f : v) amax = std::max(amax, std::fabs(f));
  return amax > 0 ? amax / 127.0f : 1.0f;
}

// Our weights for one (K, N, dtype) in [N,K] row layout, in Copies() copies.
struct OurWeights {
  int64_t k = -1, n = -1;
  DType type = DType::kF32;
  int64_t bytes = 0, copies = 0;
  std::vector<uint8_t> data;
};

void FillOurRows(const std::vector<float>& w, int64_t k, int64_t n, DType type, uint8_t* dst) {
  const int64_t rb = DTypeRowBytes(type, k);
  for (int64_t j = 0; j < n; ++j) {
    const float* src = w.data() + j * k;
    uint8_t* row = dst + j * rb;
    if (IsQuantized(type)) {
      QuantizeRow(src, k, type, row);
    } else if (type == DType::kF32) {
      std::memcpy(row, src, 4 * k);
    } else {
      for (int64_t i = 0; i < k; ++i) {
        const uint16_t h = F32ToBf16(src[i]);
        std::memcpy(row + 2 * i, &h, 2);
      }
    }
  }
}

const OurWeights& Ours(int64_t k, int64_t n, DType type) {
  static OurWeights ws;
  if (ws.k == k && ws.n == n && ws.type == type) return ws;
  ws = OurWeights{k, n, type, n * DTypeRowBytes(type, k), 0, {}};
  ws.copies = Copies(ws.bytes);
  ws.data.resize(ws.bytes * ws.copies);
  FillOurRows(WeightValues(k, n), k, n, type, ws.data.data());
  for (int64_t c = 1; c < ws.copies; ++c)
    std::memcpy(ws.data.data() + c * ws.bytes, ws.data.data(), ws.bytes);
  return ws;
}

DType OurType(Kind kind) {
  return kind == Kind::kF32 ? DType::kF32 : kind == Kind::kBF16 ? DType::kBF16 : DType::kQ8_0;
}

void BM_Ours(benchmark::State& state, int64_t k, int64_t n, Kind kind) {
  const int64_t m = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const DType type = OurType(kind);
  const OurWeights& w = Ours(k, n, type);
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
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * m * n * k * state.iterations(), benchmark::Counter::kIsRate);
}

// --- oneDNN

dt SrcType(Kind kind) { return kind == Kind::kF32 ? dt::f32 : kind == Kind::kBF16 ? dt::bf16 : dt::u8; }
dt WeiType(Kind kind) { return kind == Kind::kF32 ? dt::f32 : kind == Kind::kBF16 ? dt::bf16 : dt::s8; }

// W^T as the {K,N} weights tensor in `ba` (= our [N,K] row-major bytes), element type
// of `kind`. For int8 the per-tensor scale goes to *scale.
std::vector<uint8_t> PlainWeights(const std::vector<float>& w, Kind kind, float* scale) {
  *scale = 1.0f;
  if (kind == Kind::kF32) {
    std::vector<uint8_t> out(w.size() * 4);
    std::memcpy(out.data(), w.data(), out.size());
    return out;
  }
  if (kind == Kind::kBF16) {
    std::vector<uint8_t> out(w.size() * 2);
    for (size_t i = 0; i < w.size(); ++i) {
      const uint16_t h = F32ToBf16(w[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
    return out;
  }
  *scale = Int8Scale(w);
  std::vector<uint8_t> out(w.size());
  for (size_t i = 0; i < w.size(); ++i)
    out[i] = static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(w[i] / *scale)));
  return out;
}

// Activations in the src type: bf16 by rounding, u8 as round((x + 1) * 127.5) (a
// zero-point-free stand-in: only the timing of u8 x s8 matters here).
std::vector<uint8_t> SrcBytes(const std::vector<float>& x, Kind kind, float* scale) {
  *scale = 1.0f;
  if (kind != Kind::kInt8) return PlainWeights(x, kind, scale);
  std::vector<uint8_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = static_cast<uint8_t>(std::nearbyint((x[i] + 1.0f) * 127.5f));
  *scale = 1.0f / 127.5f;
  return out;
}

// One oneDNN matmul for (M, K, N, kind, packed), with its weights in Copies() copies.
struct DnnlCase {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  std::vector<uint8_t> plain;          // copy 0, plain layout (kept for the packed reorder)
  std::vector<dnnl::memory> weights;   // one per copy
};

DnnlCase MakeCase(int64_t m, int64_t k, int64_t n, Kind kind, bool packed,
                  const std::vector<float>& w, bool one_copy = false) {
  DnnlCase c;
  const dnnl::memory::desc src_md({m, k}, SrcType(kind), tag::ab);
  const dnnl::memory::desc wei_plain({k, n}, WeiType(kind), tag::ba);
  const dnnl::memory::desc wei_md = packed ? dnnl::memory::desc({k, n}, WeiType(kind), tag::any) : wei_plain;
  const dnnl::memory::desc dst_md({m, n}, dt::f32, tag::ab);
  float w_scale = 1, x_scale = 1;
  c.plain = PlainWeights(w, kind, &w_scale);
  dnnl::primitive_attr attr;
  if (kind == Kind::kInt8) {
    std::vector<float> dummy(1);
    SrcBytes(dummy, kind, &x_scale);
    attr.set_output_scales(0, {w_scale * x_scale});
  }
  c.pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, wei_md, dst_md), attr, Engine());
  c.prim = dnnl::matmul(c.pd);
  const dnnl::memory::desc actual = c.pd.weights_desc();
  const int64_t copies = one_copy ? 1 : Copies(static_cast<int64_t>(actual.get_size()));
  dnnl::stream s(Engine());
  dnnl::memory src0(wei_plain, Engine(), c.plain.data());
  for (int64_t i = 0; i < copies; ++i) {
    dnnl::memory mem(actual, Engine());  // oneDNN-allocated (64-byte aligned)
    if (actual == wei_plain) {
      std::memcpy(mem.get_data_handle(), c.plain.data(), c.plain.size());
    } else {
      dnnl::reorder(src0, mem).execute(s, src0, mem);
    }
    c.weights.push_back(mem);
  }
  s.wait();
  return c;
}

void RunDnnl(DnnlCase& c, const void* src, float* dst, const dnnl::memory& w, dnnl::stream& s) {
  dnnl::memory src_m(c.pd.src_desc(), Engine(), const_cast<void*>(src));
  dnnl::memory dst_m(c.pd.dst_desc(), Engine(), dst);
  c.prim.execute(s, {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, dst_m}});
  s.wait();
}

void BM_Dnnl(benchmark::State& state, int64_t k, int64_t n, Kind kind, bool packed) {
  const int64_t m = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  omp_set_num_threads(threads);
  DnnlCase c = MakeCase(m, k, n, kind, packed, WeightValues(k, n));
  state.SetLabel(c.pd.impl_info_str());
  float x_scale;
  const auto src = SrcBytes(RandomVec(m * k, 3), kind, &x_scale);
  std::vector<float> y(m * n);
  dnnl::stream s(Engine());
  size_t copy = 0;
  for (auto _ : state) {
    RunDnnl(c, src.data(), y.data(), c.weights[copy], s);
    copy = copy + 1 == c.weights.size() ? 0 : copy + 1;
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["FLOPS"] =
      benchmark::Counter(2.0 * m * n * k * state.iterations(), benchmark::Counter::kIsRate);
}

// --- Batch invariance

// y[rows, n] for rows [0, m) of x, by oneDNN (ours == false) or our Linear.
// *impl gets oneDNN's implementation name.
std::vector<float> Compute(bool ours, int64_t m, int64_t k, int64_t n, Kind kind, bool packed,
                           const std::vector<float>& w, const std::vector<float>& x, int threads,
                           std::string* impl = nullptr) {
  std::vector<float> y(m * n);
  if (ours) {
    const DType type = OurType(kind);
    std::vector<uint8_t> wb(n * DTypeRowBytes(type, k));
    FillOurRows(w, k, n, type, wb.data());
    Linear(x.data(), m, k, wb.data(), type, n, nullptr, y.data(), n, Pool(threads));
    return y;
  }
  omp_set_num_threads(threads);
  DnnlCase c = MakeCase(m, k, n, kind, packed, w, /*one_copy=*/true);
  if (impl != nullptr) *impl = c.pd.impl_info_str();
  float x_scale;
  const auto src = SrcBytes(std::vector<float>(x.begin(), x.begin() + m * k), kind, &x_scale);
  dnnl::stream s(Engine());
  RunDnnl(c, src.data(), y.data(), c.weights[0], s);
  return y;
}

void BM_Invariance(benchmark::State& state, int64_t k, int64_t n, Kind kind, bool ours, bool packed) {
  const auto w = WeightValues(k, n);
  const auto x = RandomVec(512 * k, 11);
  constexpr int64_t kRows = 16;
  // Reference: each row alone, M=1, 1 thread.
  std::vector<float> ref(kRows * n);
  std::string impl1;
  for (int64_t r = 0; r < kRows; ++r) {
    const std::vector<float> xr(x.begin() + r * k, x.begin() + (r + 1) * k);
    const auto y = Compute(ours, 1, k, n, kind, packed, w, xr, 1, &impl1);
    std::copy(y.begin(), y.end(), ref.begin() + r * n);
  }
  double max_diff = 0;
  bool bitwise = true;
  std::string impls = impl1;
  for (auto _ : state) {
    // 4, 8 and 16 threads oversubscribe this 2-core machine but show whether the work split
    // (and so the summation order) changes with the thread count.
    for (int64_t m : {int64_t{1}, int64_t{16}, int64_t{512}}) {
      for (int threads : {1, 2, 4, 8, 16}) {
        if (m == 1 && threads == 1) continue;
        const int64_t rows = m == 1 ? 1 : kRows;
        std::string impl;
        const auto y = Compute(ours, m, k, n, kind, packed, w, x, threads, &impl);
        if (!ours && impls.find(impl) == std::string::npos) impls += "," + impl;
        double d = 0;
        for (int64_t i = 0; i < rows * n; ++i) {
          d = std::max(d, static_cast<double>(std::fabs(y[i] - ref[i])));
          bitwise = bitwise && std::memcmp(&y[i], &ref[i], 4) == 0;
        }
        state.counters["d_M" + std::to_string(m) + "_t" + std::to_string(threads)] = d;
        max_diff = std::max(max_diff, d);
      }
    }
  }
  state.counters["max_abs_diff"] = max_diff;
  state.counters["bitwise"] = bitwise ? 1 : 0;
  // Control that the comparison sees differences at all: oneDNN's rows against ours
  // (other summation order; for s8 a coarser quantization), M=1.
  if (!ours && kind != Kind::kInt8) {
    const std::vector<float> x0(x.begin(), x.begin() + k);
    const auto y_ours = Compute(true, 1, k, n, kind, false, w, x0, 1);
    double d = 0;
    for (int64_t i = 0; i < n; ++i) d = std::max(d, static_cast<double>(std::fabs(y_ours[i] - ref[i])));
    state.counters["vs_ours"] = d;
  }
  if (!ours) state.SetLabel(impls);
}

// --- Reference limit: the AVX2 f32 FMA peak (bench/limits.h), 1 and 2 threads.
void BM_FmaPeak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  double flops = 0;
  for (auto _ : state) flops = tessera::bench::MeasureFmaPeak(*Pool(threads));
  state.counters["FLOPS"] = flops;
}

struct Shape {
  const char* name;
  int64_t k, n;
};

int RegisterAll() {
  const Shape shapes[] = {{"896x896", 896, 896}, {"896x4864", 896, 4864}, {"4864x896", 4864, 896}};
  for (const Shape& s : shapes) {
    for (Kind kind : {Kind::kF32, Kind::kBF16, Kind::kInt8}) {
      const std::string t = kind == Kind::kInt8 ? "q8_0" : KindName(kind);
      auto* b = benchmark::RegisterBenchmark(("Ours/" + t + "/" + s.name).c_str(), BM_Ours, s.k, s.n, kind);
      b->ArgNames({"M", "threads"})->ArgsProduct({{16, 32, 512}, {1, 2}});
      b->Unit(benchmark::kMicrosecond)->UseRealTime();
      for (bool packed : {false, true}) {
        const std::string name =
            std::string("Dnnl/") + KindName(kind) + "/" + (packed ? "packed/" : "plain/") + s.name;
        auto* d = benchmark::RegisterBenchmark(name.c_str(), BM_Dnnl, s.k, s.n, kind, packed);
        d->ArgNames({"M", "threads"})->ArgsProduct({{16, 32, 512}, {1, 2}});
        d->Unit(benchmark::kMicrosecond)->UseRealTime();
      }
    }
  }
  for (const Shape& s : shapes) {
    for (Kind kind : {Kind::kF32, Kind::kBF16, Kind::kInt8}) {
      for (int v = 0; v < 3; ++v) {  // ours, dnnl plain, dnnl packed
        const bool ours = v == 0, packed = v == 2;
        if (ours && kind == Kind::kInt8) continue;  // q8_0 invariance is covered by unit tests
        const std::string name = std::string("Invariance/") + (ours ? "ours/" : "dnnl/") +
                                 KindName(kind) + (ours ? "/" : packed ? "/packed/" : "/plain/") + s.name;
        benchmark::RegisterBenchmark(name.c_str(), BM_Invariance, s.k, s.n, kind, ours, packed)
            ->Iterations(1)->Unit(benchmark::kMillisecond);
      }
    }
  }
  benchmark::RegisterBenchmark("Limit/FmaPeak", BM_FmaPeak)
      ->ArgNames({"threads"})->Arg(1)->Arg(2)->Iterations(1)->Unit(benchmark::kMillisecond);
  return 0;
}

const int kRegistered = RegisterAll();

}  // namespace
}  // namespace tessera::kernels::cpu
