#include "bench/limits.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <thread>

namespace tessera::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Keeps the sums (and so the loads) alive.
std::atomic<uint64_t> g_sink{0};

constexpr size_t kLineElems = 8;    // u64 per 64-byte line
constexpr size_t kStepElems = 32;   // u64 per 256-byte loop iteration

#define TESSERA_LOAD(p, k) _mm256_load_si256(reinterpret_cast<const __m256i*>(p) + (k))

__attribute__((target("avx2"))) uint64_t Fold(__m256i a0, __m256i a1, __m256i a2, __m256i a3, __m256i a4,
                                              __m256i a5, __m256i a6, __m256i a7) {
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)),
                                     _mm256_add_epi64(_mm256_add_epi64(a4, a5), _mm256_add_epi64(a6, a7)));
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), s);
  return out[0] + out[1] + out[2] + out[3];
}

// n is a multiple of kStepElems; p is 32-byte aligned.
// kPrefetch = 0: no software prefetch; else prefetch that many bytes ahead with
// __builtin_prefetch locality kLocality (3 = prefetcht0, 2 = prefetcht1).
template <size_t kPrefetch, int kLocality>
__attribute__((target("avx2"))) uint64_t ReadSum(const uint64_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (size_t i = 0; i < n; i += kStepElems) {
    const uint64_t* q = p + i;
    if constexpr (kPrefetch > 0) {
      // Prefetch hints never fault, so running past the end is harmless; integer
      // arithmetic keeps the out-of-range address out of pointer rules.
      const uintptr_t ahead = reinterpret_cast<uintptr_t>(q) + kPrefetch;
      for (size_t l = 0; l < kStepElems / kLineElems; ++l) {
        __builtin_prefetch(reinterpret_cast<const char*>(ahead + 64 * l), 0, kLocality);
      }
    }
    a0 = _mm256_add_epi64(a0, TESSERA_LOAD(q, 0));
    a1 = _mm256_add_epi64(a1, TESSERA_LOAD(q, 1));
    a2 = _mm256_add_epi64(a2, TESSERA_LOAD(q, 2));
    a3 = _mm256_add_epi64(a3, TESSERA_LOAD(q, 3));
    a4 = _mm256_add_epi64(a4, TESSERA_LOAD(q, 4));
    a5 = _mm256_add_epi64(a5, TESSERA_LOAD(q, 5));
    a6 = _mm256_add_epi64(a6, TESSERA_LOAD(q, 6));
    a7 = _mm256_add_epi64(a7, TESSERA_LOAD(q, 7));
  }
  return Fold(a0, a1, a2, a3, a4, a5, a6, a7);
}

// Two halves of [p, p + n) read interleaved, 128 bytes from each per iteration.
// n is a multiple of 2 * kStepElems.
__attribute__((target("avx2"))) uint64_t ReadTwoStreams(const uint64_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  const uint64_t* b = p + n / 2;
  for (size_t i = 0; i < n / 2; i += kStepElems / 2) {
    a0 = _mm256_add_epi64(a0, TESSERA_LOAD(p + i, 0));
    a1 = _mm256_add_epi64(a1, TESSERA_LOAD(b + i, 0));
    a2 = _mm256_add_epi64(a2, TESSERA_LOAD(p + i, 1));
    a3 = _mm256_add_epi64(a3, TESSERA_LOAD(b + i, 1));
    a4 = _mm256_add_epi64(a4, TESSERA_LOAD(p + i, 2));
    a5 = _mm256_add_epi64(a5, TESSERA_LOAD(b + i, 2));
    a6 = _mm256_add_epi64(a6, TESSERA_LOAD(p + i, 3));
    a7 = _mm256_add_epi64(a7, TESSERA_LOAD(b + i, 3));
  }
  return Fold(a0, a1, a2, a3, a4, a5, a6, a7);
}

#undef TESSERA_LOAD

uint64_t RunKernel(ReadKernel k, const uint64_t* p, size_t n) {
  switch (k) {
    case ReadKernel::kSum: return ReadSum<0, 3>(p, n);
    case ReadKernel::kPrefetchNear: return ReadSum<2048, 3>(p, n);
    case ReadKernel::kPrefetchFar: return ReadSum<16384, 2>(p, n);
    case ReadKernel::kTwoStreams: return ReadTwoStreams(p, n);
  }
  return 0;
}

std::vector<int> AllowedCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
  return cpus;
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// A pass counts as undisturbed when every thread was on a CPU for at least this
// fraction of the pass's wall time (else another process or the host took it).
constexpr double kCleanCpuFraction = 0.97;
// Passes run until `repeats` undisturbed ones, or kMaxPassFactor x repeats in all.
constexpr int kMaxPassFactor = 4;

bool PinTo(std::thread& t, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(t.native_handle(), sizeof(set), &set) == 0;
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

// Six independent u8 x s8 dot chains: per chain and iteration one vpmaddubsw
// (32 MACs), one vpmaddwd against ones and one vpaddd into the accumulator. The
// empty asm makes `b` opaque each iteration so nothing is hoisted out of the loop.
__attribute__((target("avx2"))) int Int8Loop(int64_t iters, int seed) {
  const __m256i x0 = _mm256_set1_epi8(static_cast<char>(seed + 1)), x1 = _mm256_set1_epi8(static_cast<char>(seed + 2)),
                x2 = _mm256_set1_epi8(static_cast<char>(seed + 3)), x3 = _mm256_set1_epi8(static_cast<char>(seed + 4)),
                x4 = _mm256_set1_epi8(static_cast<char>(seed + 5)), x5 = _mm256_set1_epi8(static_cast<char>(seed + 6));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i b = _mm256_set1_epi8(3);
  __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" : "+x"(b));
    c0 = _mm256_add_epi32(c0, _mm256_madd_epi16(_mm256_maddubs_epi16(x0, b), ones));
    c1 = _mm256_add_epi32(c1, _mm256_madd_epi16(_mm256_maddubs_epi16(x1, b), ones));
    c2 = _mm256_add_epi32(c2, _mm256_madd_epi16(_mm256_maddubs_epi16(x2, b), ones));
    c3 = _mm256_add_epi32(c3, _mm256_madd_epi16(_mm256_maddubs_epi16(x3, b), ones));
    c4 = _mm256_add_epi32(c4, _mm256_madd_epi16(_mm256_maddubs_epi16(x4, b), ones));
    c5 = _mm256_add_epi32(c5, _mm256_madd_epi16(_mm256_maddubs_epi16(x5, b), ones));
  }
  const __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(c0, c1), _mm256_add_epi32(c2, c3)),
                                     _mm256_add_epi32(c4, c5));
  return _mm256_extract_epi32(s, 0);
}
constexpr int kInt8Chains = 6;
constexpr int kMacsPerMaddubs = 32;

// The same with AVX-512 VNNI: vpdpbusd on a zmm register is 64 u8 x s8 MACs summed
// into 16 s32 lanes; 12 chains hide its latency. The quantized Linear uses it where
// the CPU has it (kernels/cpu/quant_avx512.cc), so it is then the int8 ceiling.
#if defined(__GNUC__) && !defined(__clang__)  // GCC 12's own AVX-512 headers trip these
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) int VnniLoop(int64_t iters, int seed) {
  const __m512i x = _mm512_set1_epi8(static_cast<char>(seed + 7));
  __m512i b = _mm512_set1_epi8(3);
  __m512i c[12];
  for (int i = 0; i < 12; ++i) c[i] = _mm512_set1_epi32(i + seed);
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" : "+v"(b));
#pragma GCC unroll 12
    for (int j = 0; j < 12; ++j) c[j] = _mm512_dpbusd_epi32(c[j], x, b);
  }
  __m512i s = c[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_epi32(s, c[j]);
  return _mm512_reduce_add_epi32(s);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
constexpr int kVnniChains = 12;
constexpr int kMacsPerDpbusd = 64;

bool HasAvx512Vnni() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

}  // namespace

const std::vector<ReadKernel>& AllReadKernels() {
  static const std::vector<ReadKernel> all = {ReadKernel::kSum, ReadKernel::kPrefetchNear, ReadKernel::kPrefetchFar,
                                              ReadKernel::kTwoStreams};
  return all;
}

const char* ReadKernelName(ReadKernel k) {
  switch (k) {
    case ReadKernel::kSum: return "avx2_sum";
    case ReadKernel::kPrefetchNear: return "avx2_prefetch2k";
    case ReadKernel::kPrefetchFar: return "avx2_prefetch16k";
    case ReadKernel::kTwoStreams: return "avx2_2streams";
  }
  return "?";
}

ReadBuffer::ReadBuffer(size_t bytes, bool huge_pages) {
  constexpr size_t kAlign = size_t{2} << 20;
  bytes = (bytes + kAlign - 1) / kAlign * kAlign;
  mapped_ = bytes + kAlign;
  void* m = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    mapped_ = 0;
    return;
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(m);
  const uintptr_t aligned = (base + kAlign - 1) / kAlign * kAlign;
  data_ = reinterpret_cast<uint64_t*>(aligned);
  bytes_ = bytes;
  if (huge_pages) madvise(data_, bytes_, MADV_HUGEPAGE);  // best effort
  // Write every page so reads hit real memory, not the shared zero page.
  std::memset(data_, 1, bytes_);
  unmap_base_ = m;
}

ReadBuffer::~ReadBuffer() {
  if (unmap_base_ != nullptr) munmap(unmap_base_, mapped_);
}

ReadResult MeasureReadKernel(const ReadBuffer& buf, int threads, ReadKernel kernel, int repeats) {
  ReadResult r;
  if (!buf.ok() || !__builtin_cpu_supports("avx2")) return r;
  threads = std::max(1, threads);
  repeats = std::max(1, repeats);
  // Slices in whole 512-byte units so every kernel's step divides them.
  const size_t unit = 2 * kStepElems;
  const size_t units = buf.bytes() / sizeof(uint64_t) / unit;
  const double bytes = static_cast<double>(units * unit * sizeof(uint64_t));
  struct Times {
    Clock::time_point start, end;
    double cpu = 0;  // thread CPU seconds during the pass
  };
  std::vector<Times> times(threads);
  std::vector<double> all, clean;
  int pass = -1;  // pass 0 warms up (TLB, prefetchers, clock frequency)
  bool stop = false;
  // Runs once per pass boundary, on one thread, while all others wait: scores the
  // pass just finished and decides whether to run another.
  auto on_boundary = [&]() noexcept {
    if (pass >= 1) {
      Clock::time_point first = times[0].start, last = times[0].end;
      bool undisturbed = true;
      for (const Times& t : times) {
        first = std::min(first, t.start);
        last = std::max(last, t.end);
      }
      const double wall = std::chrono::duration<double>(last - first).count();
      for (const Times& t : times) undisturbed &= t.cpu >= kCleanCpuFraction * wall;
      all.push_back(bytes / wall);
      if (undisturbed) clean.push_back(bytes / wall);
    }
    ++pass;
    stop = static_cast<int>(clean.size()) >= repeats || static_cast<int>(all.size()) >= kMaxPassFactor * repeats;
  };
  // threads + 1: the caller joins the first phase so workers start only once pinned.
  std::barrier sync(threads + 1, on_boundary);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const size_t b = units * t / threads * unit, e = units * (t + 1) / threads * unit;
      uint64_t sum = 0;
      for (;;) {
        sync.arrive_and_wait();
        if (stop) break;
        const double c0 = ThreadCpuSeconds();
        times[t].start = Clock::now();
        sum += RunKernel(kernel, buf.data() + b, e - b);
        times[t].end = Clock::now();
        times[t].cpu = ThreadCpuSeconds() - c0;
      }
      g_sink += sum;
    });
  }
  const std::vector<int> cpus = AllowedCpus();
  r.pinned = static_cast<int>(cpus.size()) >= threads;
  for (int t = 0; t < threads && r.pinned; ++t) r.pinned = PinTo(pool[t], cpus[t]);
  sync.arrive_and_drop();
  for (auto& t : pool) t.join();
  r.passes = static_cast<int>(all.size());
  r.clean_passes = static_cast<int>(clean.size());
  // A disturbed pass can only read low (its wall time includes time off the CPU),
  // so the best is taken over all passes; the median over undisturbed ones if any.
  r.best = *std::max_element(all.begin(), all.end());
  std::vector<double>& rates = clean.empty() ? all : clean;
  std::sort(rates.begin(), rates.end());
  r.median = rates[rates.size() / 2];
  return r;
}

double MeasureReadBandwidth(ThreadPool& pool, size_t bytes, int repeats) {
  ReadBuffer buf(bytes, /*huge_pages=*/true);
  double best = 0;
  for (ReadKernel k : AllReadKernels()) {
    best = std::max(best, MeasureReadKernel(buf, pool.num_threads(), k, repeats).best);
  }
  return best;
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

double MeasureInt8DotPeak(ThreadPool& pool) {
  if (!__builtin_cpu_supports("avx2")) return 0;
  const int64_t iters = 20'000'000;
  std::atomic<int> sink{0};
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    const auto t0 = Clock::now();
    pool.ParallelFor(pool.num_threads(), 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) sink += Int8Loop(iters, static_cast<int>(t)) == 42;
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(pool.num_threads()) * iters * kInt8Chains * kMacsPerMaddubs / s);
  }
  if (!HasAvx512Vnni()) return best;
  for (int r = 0; r < 3; ++r) {
    const int64_t vnni_iters = iters / 2;
    const auto t0 = Clock::now();
    pool.ParallelFor(pool.num_threads(), 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) sink += VnniLoop(vnni_iters, static_cast<int>(t)) == 42;
    });
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(pool.num_threads()) * vnni_iters * kVnniChains * kMacsPerDpbusd / s);
  }
  return best;
}

}  // namespace tessera::bench
