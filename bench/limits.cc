#include "bench/limits.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;

__attribute__((target("avx2"))) uint64_t SumRange(const uint64_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  uint64_t s = out[0] + out[1] + out[2] + out[3];
  for (; i < n; ++i) s += p[i];
  return s;
}

// 12 independent accumulators (named, so they stay in registers) hide the FMA
// latency on two pipes: 12 FMAs x 8 lanes x 2 FLOP per iteration.
__attribute__((target("avx2,fma"))) float FmaLoop(int64_t iters, float seed) {
  __m256 a0 = _mm256_set1_ps(seed), a1 = _mm256_set1_ps(seed + 1), a2 = _mm256_set1_ps(seed + 2),
         a3 = _mm256_set1_ps(seed + 3), a4 = _mm256_set1_ps(seed + 4), a5 = _mm256_set1_ps(seed + 5),
         a6 = _mm256_set1_ps(seed + 6), a7 = _mm256_set1_ps(seed + 7), a8 = _mm256_set1_ps(seed + 8),
         a9 = _mm256_set1_ps(seed + 9), a10 = _mm256_set1_ps(seed + 10), a11 = _mm256_set1_ps(seed + 11);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    a0 = _mm256_fmadd_ps(a0, m, c);
    a1 = _mm256_fmadd_ps(a1, m, c);
    a2 = _mm256_fmadd_ps(a2, m, c);
    a3 = _mm256_fmadd_ps(a3, m, c);
    a4 = _mm256_fmadd_ps(a4, m, c);
    a5 = _mm256_fmadd_ps(a5, m, c);
    a6 = _mm256_fmadd_ps(a6, m, c);
    a7 = _mm256_fmadd_ps(a7, m, c);
    a8 = _mm256_fmadd_ps(a8, m, c);
    a9 = _mm256_fmadd_ps(a9, m, c);
    a10 = _mm256_fmadd_ps(a10, m, c);
    a11 = _mm256_fmadd_ps(a11, m, c);
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  return out[0];
}

}  // namespace

double MeasureReadBandwidth(ThreadPool& pool, size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(uint64_t);
  auto* buf = static_cast<uint64_t*>(std::aligned_alloc(64, n * sizeof(uint64_t)));
  if (buf == nullptr) return 0;
  // Touch every page from the threads that will read it.
  pool.ParallelFor(static_cast<int64_t>(n), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) buf[i] = static_cast<uint64_t>(i);
  });
  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    pool.ParallelFor(static_cast<int64_t>(n), 1 << 16, [&](int64_t b, int64_t e) {
      sink += SumRange(buf + b, static_cast<size_t>(e - b));
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n * sizeof(uint64_t)) / s);
  }
  std::free(buf);
  return sink.load() == 42 ? best + 1e-9 : best;
}

double MeasureFmaPeak(ThreadPool& pool) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
  const int64_t iters = 20'000'000;
  std::atomic<int> sink{0};
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = Clock::now();
    pool.ParallelFor(pool.num_threads(), 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) sink += FmaLoop(iters, static_cast<float>(t)) > 1e30f;
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(pool.num_threads()) * iters * 12 * 16 / s);
  }
  return best;
}

}  // namespace tessera::bench
