// A CPU emulator of CUDA's execution model, for running kernels/cuda in CI on
// machines without a GPU (docs/architecture.md, "Testing"). Built with the host compiler and
// TESSERA_CUDA_EMU; reached through the stand-in headers in emu/include
// (cuda_runtime.h, cuda_bf16.h, cuda_fp16.h, cublas_v2.h), so kernel and backend
// sources are the same text nvcc compiles.
//
// Model: a launch runs synchronously on the calling OS thread, block after
// block. Each CUDA thread of a block is a fiber with its own stack; a fiber runs
// until it reaches a barrier (__syncthreads, a warp shuffle/vote/__syncwarp), and
// the block's scheduler releases a barrier once every live participant has
// arrived. A barrier that can never be released (divergent __syncthreads, a
// shuffle naming an exited lane) aborts with the kernel's name and where each
// thread waits. __shared__ variables are thread_local statics: shared by the
// fibers of the running block (blocks never interleave). Device memory is host
// memory, so ASan checks kernel accesses.
//
// What it does not model: timing, the weak memory model (all fibers of a block
// see each other's writes at once), concurrency between blocks or streams, and
// results that differ with the GPU's approximate intrinsics (rsqrtf, __expf are
// exact here).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "common/dtype.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static thread_local
#define __constant__
#define __managed__
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __CUDA_EMU__ 1

// --- vector types and dim3 ---------------------------------------------------
struct uint3 { unsigned x, y, z; };
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

// --- bf16 / f16 --------------------------------------------------------------
struct __nv_bfloat16 {
  uint16_t __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : __x(::tessera::F32ToBf16(f)) {}
  operator float() const { return ::tessera::Bf16ToF32(__x); }
};
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
struct __half {
  uint16_t __x;
  __half() = default;
  __half(float f) : __x(::tessera::F32ToF16(f)) {}
  operator float() const { return ::tessera::F16ToF32(__x); }
};
struct __half2 { __half x, y; };
using nv_bfloat16 = __nv_bfloat16;
using half = __half;
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return static_cast<float>(b); }
inline float2 __bfloat1622float2(__nv_bfloat162 b) { return {float(b.x), float(b.y)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return {__nv_bfloat16(f.x), __nv_bfloat16(f.y)}; }
inline __half __float2half_rn(float f) { return __half(f); }
inline __half __float2half(float f) { return __half(f); }
inline float __half2float(__half h) { return static_cast<float>(h); }
inline float2 __half22float2(__half2 h) { return {float(h.x), float(h.y)}; }
inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }

// --- math intrinsics (exact host versions) ------------------------------------
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
inline double __longlong_as_double(long long i) { double d; std::memcpy(&d, &i, 8); return d; }
inline long long __double_as_longlong(double d) { long long i; std::memcpy(&i, &d, 8); return i; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll(static_cast<unsigned long long>(x)); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
template <typename T>
inline T __ldg(const T* p) { return *p; }
constexpr int warpSize = 32;

namespace tessera::emu {

// The running fiber's coordinates (set by the block scheduler before each resume).
extern thread_local uint3 g_thread_idx;
extern thread_local uint3 g_block_idx;
extern thread_local dim3 g_block_dim;
extern thread_local dim3 g_grid_dim;

// Block-wide barrier; warp barrier over `mask` (lanes of the caller's warp).
void SyncThreads();
void SyncWarp(unsigned mask);
// Warp exchange: publishes `bits` for the caller's lane, waits for the lanes in
// mask, returns the bits lane `src` published (own bits when src is outside the warp).
uint64_t WarpExchange(unsigned mask, uint64_t bits, int src_lane);
// OR over the lanes in mask of (pred << lane).
unsigned WarpBallot(unsigned mask, bool pred);
unsigned ActiveMask();
int LaneId();
void* DynamicSmem();
void ThreadFence();

struct LaunchConfig {
  dim3 grid, block;
  size_t smem = 0;
  void* stream = nullptr;
  const char* name = "";
};
// Runs (or, while `stream` is capturing a graph, records) body once per thread of
// every block. Errors become the thread's sticky CUDA error.
void Launch(const LaunchConfig& config, std::function<void()> body);

// TESSERA_LAUNCH(grid, block, smem, stream, Kernel)(args...): Launcher deduces the
// kernel's parameter types, copies the arguments (by value, as CUDA does) and runs.
template <typename... P>
class Launcher {
 public:
  template <typename Stream>
  Launcher(dim3 grid, dim3 block, size_t smem, Stream stream, void (*kernel)(P...), const char* name)
      : config_{grid, block, smem, static_cast<void*>(stream), name}, kernel_(kernel) {}
  template <typename... A>
  void operator()(A&&... args) {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
    std::tuple<std::decay_t<P>...> copied(static_cast<std::decay_t<P>>(std::forward<A>(args))...);
    auto* kernel = kernel_;
    Launch(config_, [kernel, copied]() { std::apply(kernel, copied); });
  }

 private:
  LaunchConfig config_;
  void (*kernel_)(P...);
};

}  // namespace tessera::emu

#define threadIdx (::tessera::emu::g_thread_idx)
#define blockIdx (::tessera::emu::g_block_idx)
#define blockDim (::tessera::emu::g_block_dim)
#define gridDim (::tessera::emu::g_grid_dim)

inline void __syncthreads() { ::tessera::emu::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::tessera::emu::SyncWarp(mask); }
inline void __threadfence() { ::tessera::emu::ThreadFence(); }
inline void __threadfence_block() { ::tessera::emu::ThreadFence(); }
inline unsigned __activemask() { return ::tessera::emu::ActiveMask(); }
inline unsigned __ballot_sync(unsigned mask, int pred) { return ::tessera::emu::WarpBallot(mask, pred != 0); }
inline int __any_sync(unsigned mask, int pred) { return ::tessera::emu::WarpBallot(mask, pred != 0) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  return (::tessera::emu::WarpBallot(mask, pred != 0) & mask & ::tessera::emu::ActiveMask()) ==
         (mask & ::tessera::emu::ActiveMask());
}

namespace tessera::emu {
template <typename T>
T ShuffleFrom(unsigned mask, T v, int src) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of an unsupported type");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = WarpExchange(mask, bits, src);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
}  // namespace tessera::emu

template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  const int lane = ::tessera::emu::LaneId();
  return ::tessera::emu::ShuffleFrom(mask, v, (lane & ~(width - 1)) + (src_lane & (width - 1)));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = ::tessera::emu::LaneId();
  const int src = lane ^ lane_mask;
  const bool inside = (src & ~(width - 1)) == (lane & ~(width - 1));
  return ::tessera::emu::ShuffleFrom(mask, v, inside ? src : lane);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::tessera::emu::LaneId();
  const int src = lane + static_cast<int>(delta);
  const bool inside = (src & ~(width - 1)) == (lane & ~(width - 1));
  return ::tessera::emu::ShuffleFrom(mask, v, inside ? src : lane);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = ::tessera::emu::LaneId();
  const int src = lane - static_cast<int>(delta);
  const bool inside = src >= 0 && (src & ~(width - 1)) == (lane & ~(width - 1));
  return ::tessera::emu::ShuffleFrom(mask, v, inside ? src : lane);
}

// Atomics: fibers of a block switch only at barriers, and blocks run one at a
// time, so plain read-modify-write is atomic here.
template <typename T>
T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <typename T>
T atomicSub(T* p, T v) { T old = *p; *p = old - v; return old; }
template <typename T>
T atomicMax(T* p, T v) { T old = *p; if (v > old) *p = v; return old; }
template <typename T>
T atomicMin(T* p, T v) { T old = *p; if (v < old) *p = v; return old; }
template <typename T>
T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <typename T>
T atomicCAS(T* p, T compare, T v) { T old = *p; if (old == compare) *p = v; return old; }
template <typename T>
T atomicOr(T* p, T v) { T old = *p; *p = old | v; return old; }
template <typename T>
T atomicAnd(T* p, T v) { T old = *p; *p = old & v; return old; }
inline long long clock64() { return static_cast<long long>(__builtin_ia32_rdtsc()); }
