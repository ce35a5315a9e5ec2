// tessera-cuda-bench helpers: device memory, random fills, event timing with
// warm-up, rotation and medians, and the report (JSON + tables).
// Single-threaded; every call here synchronizes only where it says so.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "kernels/cuda/types.cuh"

namespace tessera::cuda_bench {

using kernels::cuda::ElemType;

Status CudaStatus(cudaError_t e, const std::string& what);
#define CUDA_BENCH_TRY(expr)                                                      \
  do {                                                                            \
    const cudaError_t e_ = (expr);                                                \
    if (e_ != cudaSuccess) return ::tessera::cuda_bench::CudaStatus(e_, #expr);  \
  } while (0)

// Owns one cudaMalloc allocation (not zeroed). Move-only.
class DeviceMem {
 public:
  DeviceMem() = default;
  static StatusOr<DeviceMem> Alloc(int64_t bytes);
  DeviceMem(DeviceMem&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; }
  DeviceMem& operator=(DeviceMem&& o) noexcept;
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
  ~DeviceMem();
  void* get() const { return p_; }
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }
  int64_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  int64_t bytes_ = 0;
};

// Fills `count` elements of `type` at dst with N(0, scale) values (never zeros:
// zeros hide unwritten outputs and run faster). A 16M-element host pattern,
// offset by `seed`, is uploaded once and tiled with device copies, so filling
// tens of GB costs about one device copy. Synchronous.
Status FillRandom(void* dst, int64_t count, ElemType type, uint64_t seed, float scale = 1.0f);
// Synchronous upload of a host vector.
template <typename T>
Status Upload(void* dst, const std::vector<T>& v) {
  CUDA_BENCH_TRY(cudaMemcpy(dst, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return Status::Ok();
}

struct Timing {
  double median_us = 0, min_us = 0, max_us = 0;  // per op call
  int samples = 0;  // timed replays
  int inner = 0;    // op calls per replay
  bool graph = false;  // replays were CUDA graphs (else plain launches)
};

struct TimeOptions {
  double target_ms = 2.0;  // aim for replays at least this long
  int max_inner = 64;
  int min_repeats = 5, max_repeats = 15;
  double budget_ms = 300;  // stop adding repeats past this (after min_repeats)
};

// op(v, stream) enqueues variant v (v < variants: rotating input sets so the
// working set exceeds L2) and returns the launch's error. Runs every variant once
// (warm-up, checked), then `inner` calls per replay (captured as a CUDA graph
// when capture works, else plain launches), timed with events; the median over
// replays divided by inner. Synchronizes the stream.
using OpFn = std::function<cudaError_t(int variant, cudaStream_t stream)>;
StatusOr<Timing> TimeOp(cudaStream_t stream, int variants, const OpFn& op, const TimeOptions& options = {});

// How many copies of a `bytes_per_set` working set make at least 3x the L2
// (so timed calls read from device memory), within max_total_bytes; >= 1, <= 32.
int RotatingSets(int64_t bytes_per_set, int64_t l2_bytes, int64_t max_total_bytes = int64_t{1} << 30);

struct Row {
  Row() = default;
  Row(std::string section_, std::string name_, std::string shape_)
      : section(std::move(section_)), name(std::move(name_)), shape(std::move(shape_)) {}
  std::string section;  // ceiling | kernel | attention | linear
  std::string name;     // e.g. "RmsNorm", "cuBLAS bf16"
  std::string shape;    // e.g. "rows=256 dim=4096"
  Timing t;
  double bytes = 0;  // counted device-memory bytes per call (each input read once, output written once)
  double flops = 0;  // counted FLOPs per call
  std::string error;  // non-empty: this measurement failed or was skipped
  nlohmann::json extra = nlohmann::json::object();
};

// Collects results; fractions are computed against the ceilings when printed.
class Report {
 public:
  nlohmann::json& root() { return root_; }
  void SetCeilings(double copy_bytes_s, double bf16_flop_s, double f32_flop_s);
  double copy_bytes_s() const { return copy_bytes_s_; }
  void Add(const Row& row);
  void AddModel(const nlohmann::json& entry);  // one model measurement (model_bench.cc)
  void AddNote(const std::string& note);
  // Rewrites the whole file (called after every section, so a run cut short keeps
  // what it measured).
  Status WriteJson(const std::string& path) const;
  void PrintTables(std::FILE* out) const;
  // Measurements that failed (errors other than "skipped: ...").
  int Failures() const;

 private:
  nlohmann::json RowJson(const Row& r) const;
  nlohmann::json root_ = nlohmann::json::object();
  std::vector<Row> rows_;
  std::vector<nlohmann::json> models_;
  std::vector<std::string> notes_;
  double copy_bytes_s_ = 0, bf16_flop_s_ = 0, f32_flop_s_ = 0;
};

// The shapes the kernel sections measure: Llama-3-8B at serving sizes, or tiny
// ones for a smoke run (the CPU emulator's ctest, where only correctness of the
// benchmark's own code matters).
struct Dims {
  int64_t hidden, inter, q_heads, kv_heads, head_dim, vocab, max_pos;
  std::vector<int64_t> tokens;  // elementwise ops: decode batch, prefill chunk
  int64_t sample_rows;
  int64_t copy_layers, copy_blocks, copy_pairs;  // CopyBlocks
  std::vector<int64_t> attn_batches, attn_contexts, prompts;
  int64_t chunk_context, chunk;   // a chunked-prefill step: `chunk` queries at the end of chunk_context
  int64_t decode_prefill_prompt;  // the deterministic mode's prefill (decode kernel) at this prompt
  int64_t gemm, copy_bytes;       // ceilings: square GEMM size, D2D copy bytes (cap)
  struct Linear {
    const char* name;
    int64_t k, n;
  };
  std::vector<Linear> linears;
  std::vector<int64_t> linear_ms;
  struct Moe {  // an MoE layer's routed experts
    const char* name;
    int64_t experts, top_k, hidden, inter;
  };
  std::vector<Moe> moes;
  std::vector<int64_t> moe_batches;
  int64_t qkv() const { return (q_heads + 2 * kv_heads) * head_dim; }
  static Dims Llama8B(bool quick);
  static Dims Tiny();
};

// Smoke timing: every TimeOp does 2 calls per replay, 2 replays (emulator runs).
void SetSmokeTiming(bool on);

// Shared by the sections: the stream, the device's L2 size, the report, a
// deadline (seconds on a steady clock) past which sections record "skipped".
struct Context {
  cudaStream_t stream = nullptr;
  int64_t l2_bytes = 50 << 20;
  int sm_count = 0;
  Report* report = nullptr;
  std::string json_path;
  double deadline_s = 0;
  Dims dims = Dims::Llama8B(false);
  double Now() const;
  bool OutOfTime() const { return Now() > deadline_s; }
};

// Adds `row` with t's timing, or with t's error. Returns an error only when the
// device is unusable afterwards (a sticky CUDA error), so the caller stops.
Status AddTimed(Context& ctx, Row row, const StatusOr<Timing>& t);

// Free device memory in bytes (cudaMemGetInfo), 0 on error.
int64_t FreeDeviceBytes();

}  // namespace tessera::cuda_bench
