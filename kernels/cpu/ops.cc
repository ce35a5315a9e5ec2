// Public CPU ops: feature detection, scalar/AVX2/AVX-512 dispatch and threading.
// Every op splits work by output rows/columns/items only (never a reduction), so
// the thread count and partition never change a value (docs/architecture.md, "Batch invariance").
#include "kernels/cpu/ops.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cpu/internal.h"

namespace tessera::kernels::cpu {
namespace {

// -1: no override; 0: force scalar; 1: force AVX2.
std::atomic<int> g_avx2_override{-1};

bool DetectedUseAvx2() {
  static const bool use = [] {
    const CpuFeatures& f = GetCpuFeatures();
    const char* env = std::getenv("TESSERA_CPU_SCALAR");
    const bool forced_scalar = env != nullptr && env[0] != '\0' && std::strcmp(env, "0") != 0;
    return f.avx2 && f.fma && f.f16c && !forced_scalar;
  }();
  return use;
}

// -1: no override; 0: VNNI off; 1: VNNI on (when UseAvx2()).
std::atomic<int> g_vnni_override{-1};

bool DetectedUseAvx512Vnni() {
  static const bool use = [] {
    const char* env = std::getenv("TESSERA_CPU_NO_AVX512");
    const bool off = env != nullptr && env[0] != '\0' && std::strcmp(env, "0") != 0;
    return GetCpuFeatures().avx512vnni && !off;
  }();
  return use;
}

#if defined(__x86_64__) || defined(__i386__)
// XCR0 (OS-enabled state components); only valid when CPUID.1:ECX.OSXSAVE.
uint64_t ReadXcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}
#endif

[[noreturn]] void Fatal(const char* what, DType t) {
  std::fprintf(stderr, "tessera kernels: %s does not support dtype %s\n", what,
               std::string(DTypeName(t)).c_str());
  std::abort();
}

void CheckFloatType(const char* what, DType t) {
  if (t != DType::kF32 && t != DType::kF16 && t != DType::kBF16) Fatal(what, t);
}

void CheckWeightType(const char* what, DType t) {
  if (!IsQuantized(t)) CheckFloatType(what, t);
}

// Below this many work units (~ one float touched or one FMA) per part, waking a
// worker (tens of microseconds) costs more than it saves.
constexpr int64_t kMinUnitsPerPart = int64_t{1} << 16;

// Runs fn over [0, n) items, in parallel only when each part gets enough work.
template <class Fn>
void ForItems(ThreadPool* pool, int64_t n, int64_t units_per_item, const Fn& fn) {
  if (n <= 0) return;
  units_per_item = std::max<int64_t>(1, units_per_item);
  if (pool == nullptr || pool->num_threads() <= 1 || n * units_per_item < 2 * kMinUnitsPerPart) {
    fn(int64_t{0}, n);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kMinUnitsPerPart / units_per_item);
  pool->ParallelFor(n, grain, [&](int64_t b, int64_t e) { fn(b, e); });
}

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    // clang 14 lacks "f16c" in __builtin_cpu_supports: read CPUID.1:ECX bit 29.
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    bool osxsave = false;
    if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
      f.f16c = (ecx & (1u << 29)) != 0;
      osxsave = (ecx & (1u << 27)) != 0;
    }
    // AVX-512 needs the OS to save XMM|YMM (XCR0 bits 1-2) and opmask|ZMM_Hi256|
    // Hi16_ZMM (bits 5-7); CPUID.7.0: EBX F(16) BW(30) VL(31), ECX VNNI(11).
    if (osxsave && (ReadXcr0() & 0xE6) == 0xE6 && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
      const bool f512 = (ebx & (1u << 16)) != 0, bw = (ebx & (1u << 30)) != 0;
      const bool vl = (ebx & (1u << 31)) != 0, vnni = (ecx & (1u << 11)) != 0;
      f.avx512vnni = f512 && bw && vl && vnni;
    }
#endif
    return f;
  }();
  return features;
}

bool UseAvx2() {
  const int o = g_avx2_override.load(std::memory_order_relaxed);
  return o >= 0 ? o == 1 : DetectedUseAvx2();
}

bool SetUseAvx2ForTesting(bool use_avx2) {
  if (use_avx2) {
    const CpuFeatures& f = GetCpuFeatures();
    if (!(f.avx2 && f.fma && f.f16c)) return false;
  }
  g_avx2_override.store(use_avx2 ? 1 : 0);
  return true;
}

void ClearUseAvx2ForTesting() { g_avx2_override.store(-1); }

bool UseAvx512Vnni() {
  if (!UseAvx2()) return false;
  const int o = g_vnni_override.load(std::memory_order_relaxed);
  return o >= 0 ? o == 1 : DetectedUseAvx512Vnni();
}

bool SetUseAvx512VnniForTesting(bool use_vnni) {
  if (use_vnni && !GetCpuFeatures().avx512vnni) return false;
  g_vnni_override.store(use_vnni ? 1 : 0);
  return true;
}

void ClearUseAvx512VnniForTesting() { g_vnni_override.store(-1); }

const char* QuantLinearPath(DType w_type, int64_t m) {
  if (!UseAvx2()) return "scalar";
  const bool vnni = UseAvx512Vnni() && internal::LinearQuantAvx512Supports(w_type);
  // Forced on (tests): every m, so the VNNI kernel is checked at small m too.
  if (vnni && g_vnni_override.load(std::memory_order_relaxed) == 1) return "vnni";
  if (internal::QuantGemvPreferred(w_type, m)) return "gemv";
  if (!vnni) return "avx2";
  return internal::LinearQuantAvx512Preferred(w_type, m) ? "vnni" : "avx2";
}

namespace {

// Activation scratch of the calling thread for quantized Linear (workers only read it).
thread_local std::vector<int8_t> t_act_q;
thread_local std::vector<float> t_act_d;
thread_local std::vector<int16_t> t_act_sums;
thread_local std::vector<int16_t> t_act_sums16;

// Quantized weights: x is quantized once per call (rows in parallel, each row alone),
// then threads split the columns like the float path.
void LinearQuant(const float* x, int64_t m, int64_t k, const void* w, DType w_type, int64_t n,
                 const float* bias, float* y, int64_t ldy, ThreadPool* pool) {
  const int64_t block = internal::ActBlock(w_type);
  if (k % DTypeBlockElems(w_type) != 0) {
    std::fprintf(stderr, "tessera kernels: Linear: k=%lld is not a multiple of the %s block\n",
                 static_cast<long long>(k), std::string(DTypeName(w_type)).c_str());
    std::abort();
  }
  const bool avx2 = UseAvx2();
  t_act_q.resize(static_cast<size_t>(m * k));
  t_act_d.resize(static_cast<size_t>(m * (k / block)));
  t_act_sums.resize(static_cast<size_t>(m * (k / 32)));
  const bool need16 = internal::NeedsSums16(w_type);
  if (need16) t_act_sums16.resize(static_cast<size_t>(m * (k / 16)));
  int8_t* q = t_act_q.data();
  float* d = t_act_d.data();
  int16_t* sums = t_act_sums.data();
  int16_t* sums16 = need16 ? t_act_sums16.data() : nullptr;
  ForItems(pool, m, 4 * k, [&](int64_t b, int64_t e) {
    auto fn = avx2 ? internal::QuantizeActsAvx2 : internal::QuantizeActsScalar;
    fn(x + b * k, e - b, k, block, q + b * k, d + b * (k / block), sums + b * (k / 32),
       need16 ? sums16 + b * (k / 16) : nullptr);
  });
  const internal::QuantActs acts{q, d, sums, m, k, sums16};
  const char* path = QuantLinearPath(w_type, m);
  const bool vnni = std::strcmp(path, "vnni") == 0, gemv = std::strcmp(path, "gemv") == 0;
  // Column blocks of 24 (multiple of the 8-column AVX2 tiles) or 32 (16-column VNNI
  // groups). Cost of a block ~ its m*k int8 MACs (~32 per 16 vector ops) plus its
  // weight bytes streamed (~1/4 unit each).
  const int64_t kBlock = vnni ? 32 : 24;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int64_t units = kBlock * (k * m / 8 + DTypeRowBytes(w_type, k)) / 4;
  ForItems(pool, blocks, units, [&](int64_t b, int64_t e) {
    const int64_t n0 = b * kBlock, n1 = std::min(n, e * kBlock);
    if (vnni) {
      internal::LinearQuantColsAvx512(acts, w, w_type, n0, n1, bias, y, ldy);
    } else if (gemv) {
      internal::QuantGemvColsAvx2(acts, w, w_type, n0, n1, bias, y, ldy);
    } else if (avx2) {
      internal::LinearQuantColsAvx2(acts, w, w_type, n0, n1, bias, y, ldy);
    } else {
      internal::LinearQuantColsScalar(acts, w, w_type, n0, n1, bias, y, ldy);
    }
  });
}

}  // namespace

void Linear(const float* x, int64_t m, int64_t k, const void* w, DType w_type, int64_t n,
            const float* bias, float* y, int64_t ldy, ThreadPool* pool) {
  CheckWeightType("Linear", w_type);
  if (m <= 0 || n <= 0) return;
  if (IsQuantized(w_type)) return LinearQuant(x, m, k, w, w_type, n, bias, y, ldy, pool);
  const bool avx2 = UseAvx2();
  // Threads split the columns in blocks of 24 (a multiple of the 3- and 8-wide
  // register tiles), never K. Cost of a block ~ its m*k FMAs (8-wide, ~1/4 unit each)
  // plus its weight bytes streamed from memory (~1/4 unit each).
  constexpr int64_t kBlock = 24;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int64_t units = kBlock * (k * m + DTypeRowBytes(w_type, k)) / 4;
  ForItems(pool, blocks, units, [&](int64_t b, int64_t e) {
    const int64_t n0 = b * kBlock, n1 = std::min(n, e * kBlock);
    if (avx2) {
      internal::LinearColsAvx2(x, m, k, w, w_type, n0, n1, bias, y, ldy);
    } else {
      internal::LinearColsScalar(x, m, k, w, w_type, n0, n1, bias, y, ldy);
    }
  });
}

void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
             float* out, ThreadPool* pool) {
  const bool avx2 = UseAvx2();
  ForItems(pool, rows, 2 * dim, [&](int64_t b, int64_t e) {
    auto fn = avx2 ? internal::RmsNormRowsAvx2 : internal::RmsNormRowsScalar;
    fn(x + b * dim, weight, e - b, dim, eps, out + b * dim);
  });
}

void AddRmsNorm(float* residual, const float* x, const float* weight, int64_t rows,
                int64_t dim, float eps, float* out, ThreadPool* pool) {
  const bool avx2 = UseAvx2();
  ForItems(pool, rows, 3 * dim, [&](int64_t b, int64_t e) {
    auto fn = avx2 ? internal::AddRmsNormRowsAvx2 : internal::AddRmsNormRowsScalar;
    fn(residual + b * dim, x + b * dim, weight, e - b, dim, eps, out + b * dim);
  });
}

void SiluMul(const float* gate_up, int64_t rows, int64_t inter, float* out, ThreadPool* pool) {
  const bool avx2 = UseAvx2();
  ForItems(pool, rows, 8 * inter, [&](int64_t b, int64_t e) {
    auto fn = avx2 ? internal::SiluMulRowsAvx2 : internal::SiluMulRowsScalar;
    fn(gate_up + b * 2 * inter, e - b, inter, out + b * inter);
  });
}

void GeluTanhMul(const float* gate_up, int64_t rows, int64_t inter, float* out, ThreadPool* pool) {
  const bool avx2 = UseAvx2();
  ForItems(pool, rows, 12 * inter, [&](int64_t b, int64_t e) {
    auto fn = avx2 ? internal::GeluTanhMulRowsAvx2 : internal::GeluTanhMulRowsScalar;
    fn(gate_up + b * 2 * inter, e - b, inter, out + b * inter);
  });
}

void Scale(float* x, int64_t n, float s, ThreadPool* pool) {
  // Chunks of 4096: a multiply each, so one thread up to well past a hidden row.
  constexpr int64_t kChunk = 4096;
  ForItems(pool, (n + kChunk - 1) / kChunk, kChunk, [&](int64_t b, int64_t e) {
    for (int64_t i = b * kChunk, end = std::min(n, e * kChunk); i < end; ++i) x[i] *= s;
  });
}

void SoftCap(float* x, int64_t n, float cap, ThreadPool* pool) {
  const bool avx2 = UseAvx2();
  constexpr int64_t kChunk = 4096;  // a multiple of 8: chunk edges never split a vector
  ForItems(pool, (n + kChunk - 1) / kChunk, 16 * kChunk, [&](int64_t b, int64_t e) {
    const int64_t lo = b * kChunk, hi = std::min(n, e * kChunk);
    (avx2 ? internal::SoftCapAvx2 : internal::SoftCapScalar)(x + lo, hi - lo, cap);
  });
}

void Embedding(const void* table, DType type, int64_t dim, const int32_t* ids,
               int64_t num_tokens, float* out, ThreadPool* pool) {
  CheckWeightType("Embedding", type);
  const bool avx2 = UseAvx2() && !IsQuantized(type);
  const auto* base = static_cast<const uint8_t*>(table);
  const int64_t row_bytes = DTypeRowBytes(type, dim);
  ForItems(pool, num_tokens, dim, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const void* row = base + static_cast<int64_t>(ids[t]) * row_bytes;
      if (avx2) {
        internal::ConvertAvx2(row, type, dim, out + t * dim);
      } else {
        internal::ConvertScalar(row, type, dim, out + t * dim);
      }
    }
  });
}

void Rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t x_stride,
          int64_t rot_dim, const int32_t* positions, const float* cos_sin, ThreadPool* pool) {
  if (rot_dim <= 1) return;
  const bool avx2 = UseAvx2();
  ForItems(pool, tokens * heads, 2 * rot_dim, [&](int64_t b, int64_t e) {
    auto fn = avx2 ? internal::RopeItemsAvx2 : internal::RopeItemsScalar;
    fn(x, heads, head_dim, x_stride, rot_dim, positions, cos_sin, b, e);
  });
}

void WriteKv(const float* k, int64_t k_stride, const float* v, int64_t v_stride,
             int64_t tokens, int64_t kv_heads, int64_t head_dim, const int64_t* slot_mapping,
             float* k_cache, float* v_cache) {
  const int64_t row = kv_heads * head_dim;
  const size_t bytes = static_cast<size_t>(row) * sizeof(float);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    std::memcpy(k_cache + slot * row, k + t * k_stride, bytes);
    std::memcpy(v_cache + slot * row, v + t * v_stride, bytes);
  }
}

void PagedAttention(const PagedAttentionArgs& args, ThreadPool* pool) {
  const int64_t items = args.num_tokens * args.num_q_heads;
  if (items <= 0) return;
  const bool avx2 = UseAvx2();
  auto run = [&](int64_t b, int64_t e) {
    if (avx2) {
      internal::AttentionItemsAvx2(args, b, e);
    } else {
      internal::AttentionItemsScalar(args, b, e);
    }
  };
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  // Cost of token t ~ its key count; causal prefill makes later tokens dearer, so cut
  // the token range into `threads` parts of equal cost (boundaries on whole tokens).
  std::vector<int64_t> cum(args.num_tokens + 1, 0);
  for (int64_t t = 0; t < args.num_tokens; ++t) {
    const int64_t p = args.positions[t];
    const int64_t keys = p < 0 ? 0 : p - internal::FirstKey(p, args.sliding_window) + 1;
    cum[t + 1] = cum[t] + 1 + keys;
  }
  const int64_t units_per_key = 2 * args.head_dim * args.num_q_heads;
  if (threads <= 1 || cum.back() * units_per_key < 2 * kMinUnitsPerPart) return run(0, items);
  if (args.num_tokens < threads) {  // few tokens (decode): split heads evenly instead
    pool->ParallelFor(items, 1, run);
    return;
  }
  std::vector<int64_t> bounds(threads + 1, args.num_tokens);
  bounds[0] = 0;
  for (int i = 1; i < threads; ++i) {
    const int64_t target = cum.back() * i / threads;
    bounds[i] = std::lower_bound(cum.begin(), cum.end(), target) - cum.begin();
  }
  pool->ParallelFor(threads, 1, [&](int64_t b, int64_t e) {
    for (int64_t part = b; part < e; ++part) {
      run(bounds[part] * args.num_q_heads, bounds[part + 1] * args.num_q_heads);
    }
  });
}

void ConvertToF32(const void* src, DType type, int64_t count, float* dst) {
  CheckWeightType("ConvertToF32", type);
  if (UseAvx2() && !IsQuantized(type)) {
    internal::ConvertAvx2(src, type, count, dst);
  } else {
    internal::ConvertScalar(src, type, count, dst);
  }
}

}  // namespace tessera::kernels::cpu
