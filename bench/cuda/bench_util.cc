#include "bench/cuda/bench_util.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>

namespace tessera::cuda_bench {
namespace {

constexpr int64_t kPatternElems = int64_t{1} << 24;

// N(0, 1) pattern, generated once (~0.3 s).
const std::vector<float>& Pattern() {
  static const std::vector<float> p = [] {
    std::vector<float> v(kPatternElems);
    std::mt19937 rng(20261121);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& x : v) x = nd(rng);
    return v;
  }();
  return p;
}

uint16_t F32ToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (inputs are finite)
  return static_cast<uint16_t>(u >> 16);
}

class Events {
 public:
  Events() {
    ok_ = cudaEventCreate(&a_) == cudaSuccess && cudaEventCreate(&b_) == cudaSuccess;
  }
  ~Events() {
    if (a_) cudaEventDestroy(a_);
    if (b_) cudaEventDestroy(b_);
  }
  bool ok() const { return ok_; }
  cudaEvent_t a() const { return a_; }
  cudaEvent_t b() const { return b_; }
  // Milliseconds between a and b after b completes.
  StatusOr<float> Elapsed() const {
    CUDA_BENCH_TRY(cudaEventSynchronize(b_));
    float ms = 0;
    CUDA_BENCH_TRY(cudaEventElapsedTime(&ms, a_, b_));
    return ms;
  }

 private:
  cudaEvent_t a_ = nullptr, b_ = nullptr;
  bool ok_ = false;
};

class GraphExec {
 public:
  ~GraphExec() {
    if (exec_) cudaGraphExecDestroy(exec_);
  }
  // Captures `inner` calls of op; false (and the stream left usable) when capture fails.
  bool Capture(cudaStream_t s, int inner, int variants, const OpFn& op) {
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    cudaError_t err = cudaSuccess;
    for (int i = 0; i < inner && err == cudaSuccess; ++i) err = op(i % variants, s);
    cudaGraph_t g = nullptr;
    const cudaError_t end = cudaStreamEndCapture(s, &g);
    bool ok = err == cudaSuccess && end == cudaSuccess && g != nullptr &&
              cudaGraphInstantiate(&exec_, g, 0) == cudaSuccess;
    if (g) cudaGraphDestroy(g);
    if (!ok) {
      exec_ = nullptr;
      cudaGetLastError();  // capture errors are not sticky; clear them
    }
    return ok;
  }
  cudaGraphExec_t get() const { return exec_; }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

bool g_smoke = false;

}  // namespace

Dims Dims::Llama8B(bool quick) {
  Dims d{4096, 14336, 32, 8, 128, 128256, 8192, {256, 8192}, 256, 32, 512, 64, {1, 64, 256}, {1024, 4096, 32768},
         {2048, 8192}, 8192, 512, 2048, 8192, int64_t{1} << 30,
         // Llama-3-8B projections; lm_head is the largest single matrix of a decode step.
         {{"qkv", 4096, 6144}, {"gate_up", 4096, 28672}, {"down", 14336, 4096}, {"lm_head", 4096, 128256}},
         {1, 64, 256, 2048},
         // Qwen3-30B-A3B's and Mixtral-8x7B's expert layers.
         {{"qwen3-30b-a3b", 128, 8, 2048, 768}, {"mixtral-8x7b", 8, 2, 4096, 14336}},
         {1, 64, 256}};
  if (quick) {
    d.moes.resize(1);
    d.tokens = {256};
    d.attn_batches = {1, 64};
    d.attn_contexts = {1024, 4096};
    d.prompts = {2048};
    d.gemm = 4096;
    d.linear_ms = {1, 256};
  }
  return d;
}

Dims Dims::Tiny() {
  return Dims{256, 512, 4, 2, 32, 1000, 512, {3, 37}, 3, 2, 16, 4, {1, 3}, {40, 300}, {50}, 300, 40, 50, 64,
              int64_t{1} << 20, {{"qkv", 256, 256}, {"down", 512, 256}}, {1, 5},
              {{"tiny", 4, 2, 64, 32}}, {1, 40}};  // 40 x 2 rows >= 16 per expert: the cuBLAS path too
}

void SetSmokeTiming(bool on) { g_smoke = on; }

Status CudaStatus(cudaError_t e, const std::string& what) {
  return Internal(what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

StatusOr<DeviceMem> DeviceMem::Alloc(int64_t bytes) {
  DeviceMem m;
  if (bytes <= 0) return m;
  const cudaError_t e = cudaMalloc(&m.p_, static_cast<size_t>(bytes));
  if (e != cudaSuccess) {
    cudaGetLastError();
    m.p_ = nullptr;
    return ResourceExhausted("cudaMalloc of " + std::to_string(bytes) + " bytes: " + cudaGetErrorString(e));
  }
  m.bytes_ = bytes;
  return m;
}

DeviceMem& DeviceMem::operator=(DeviceMem&& o) noexcept {
  if (this != &o) {
    if (p_) cudaFree(p_);
    p_ = o.p_;
    bytes_ = o.bytes_;
    o.p_ = nullptr;
  }
  return *this;
}

DeviceMem::~DeviceMem() {
  if (p_) cudaFree(p_);
}

Status FillRandom(void* dst, int64_t count, ElemType type, uint64_t seed, float scale) {
  if (count <= 0) return Status::Ok();
  const std::vector<float>& pat = Pattern();
  const int64_t es = kernels::cuda::ElemSize(type);
  const int64_t n0 = std::min(count, kPatternElems);
  const int64_t off = static_cast<int64_t>((seed * 7919u + 13u) % static_cast<uint64_t>(kPatternElems));
  std::vector<unsigned char> staging(static_cast<size_t>(n0 * es));
  for (int64_t i = 0; i < n0; ++i) {
    const float v = scale * pat[static_cast<size_t>((i + off) % kPatternElems)];
    if (type == ElemType::kF32) {
      std::memcpy(&staging[i * 4], &v, 4);
    } else if (type == ElemType::kBF16) {
      const uint16_t b = F32ToBf16Bits(v);
      std::memcpy(&staging[i * 2], &b, 2);
    } else {
      const __half h = __float2half_rn(v);
      std::memcpy(&staging[i * 2], &h, 2);
    }
  }
  CUDA_BENCH_TRY(cudaMemcpy(dst, staging.data(), staging.size(), cudaMemcpyHostToDevice));
  char* d = static_cast<char*>(dst);
  for (int64_t filled = n0; filled < count;) {
    const int64_t c = std::min(filled, count - filled);
    CUDA_BENCH_TRY(cudaMemcpy(d + filled * es, d, static_cast<size_t>(c * es), cudaMemcpyDeviceToDevice));
    filled += c;
  }
  CUDA_BENCH_TRY(cudaDeviceSynchronize());
  return Status::Ok();
}

StatusOr<Timing> TimeOp(cudaStream_t stream, int variants, const OpFn& op, const TimeOptions& options) {
  variants = std::max(1, variants);
  TimeOptions o = options;
  if (g_smoke) {
    o.target_ms = 0;
    o.max_inner = 1;
    o.min_repeats = o.max_repeats = 2;
  }
  for (int v = 0; v < variants; ++v) CUDA_BENCH_TRY(op(v, stream));
  CUDA_BENCH_TRY(cudaStreamSynchronize(stream));
  Events ev;
  if (!ev.ok()) return Internal("cudaEventCreate failed");

  // Probe one call to size the replays.
  CUDA_BENCH_TRY(cudaEventRecord(ev.a(), stream));
  CUDA_BENCH_TRY(op(0, stream));
  CUDA_BENCH_TRY(cudaEventRecord(ev.b(), stream));
  ASSIGN_OR_RETURN(float probe_ms, ev.Elapsed());
  probe_ms = std::max(probe_ms, 1e-4f);
  // Every variant at least once per replay, so a graph replay rotates fully.
  int inner = static_cast<int>(std::ceil(o.target_ms / probe_ms));
  inner = std::clamp(std::max(inner, variants), 1, std::max(o.max_inner, variants));

  GraphExec graph;
  const bool use_graph = graph.Capture(stream, inner, variants, op);
  int next = 0;
  auto replay = [&]() -> cudaError_t {
    if (use_graph) return cudaGraphLaunch(graph.get(), stream);
    for (int i = 0; i < inner; ++i) {
      const cudaError_t e = op(next, stream);
      if (e != cudaSuccess) return e;
      next = (next + 1) % variants;
    }
    return cudaSuccess;
  };
  CUDA_BENCH_TRY(replay());  // warm (graph upload)
  CUDA_BENCH_TRY(cudaStreamSynchronize(stream));

  std::vector<double> per_call;
  double spent_ms = 0;
  for (int r = 0; r < o.max_repeats; ++r) {
    if (r >= o.min_repeats && spent_ms > o.budget_ms) break;
    CUDA_BENCH_TRY(cudaEventRecord(ev.a(), stream));
    CUDA_BENCH_TRY(replay());
    CUDA_BENCH_TRY(cudaEventRecord(ev.b(), stream));
    ASSIGN_OR_RETURN(float ms, ev.Elapsed());
    spent_ms += ms;
    per_call.push_back(1000.0 * ms / inner);
  }
  CUDA_BENCH_TRY(cudaGetLastError());
  std::sort(per_call.begin(), per_call.end());
  Timing t;
  t.samples = static_cast<int>(per_call.size());
  t.median_us = per_call[per_call.size() / 2];
  t.min_us = per_call.front();
  t.max_us = per_call.back();
  t.inner = inner;
  t.graph = use_graph;
  return t;
}

int RotatingSets(int64_t bytes_per_set, int64_t l2_bytes, int64_t max_total_bytes) {
  if (bytes_per_set <= 0) return 1;
  const int64_t want = (3 * l2_bytes + bytes_per_set - 1) / bytes_per_set;
  const int64_t cap = std::max<int64_t>(1, max_total_bytes / bytes_per_set);
  return static_cast<int>(std::clamp<int64_t>(std::min(want, cap), 1, 32));
}

double Context::Now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Status AddTimed(Context& ctx, Row row, const StatusOr<Timing>& t) {
  if (t.ok()) {
    row.t = *t;
    ctx.report->Add(row);
    return Status::Ok();
  }
  row.error = t.status().ToString();
  ctx.report->Add(row);
  cudaGetLastError();  // clears non-sticky errors
  const cudaError_t e = cudaDeviceSynchronize();
  return e == cudaSuccess ? Status::Ok() : CudaStatus(e, "device unusable after " + row.name);
}

int64_t FreeDeviceBytes() {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<int64_t>(free_b);
}

}  // namespace tessera::cuda_bench
