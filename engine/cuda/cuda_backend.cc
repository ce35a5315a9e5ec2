// CUDA Backend: every op on one stream, kernels from kernels/cuda, GEMMs through
// cuBLAS (LinearTiled in the deterministic mode).
#include "engine/cuda/cuda_backend.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "engine/cuda/cuda_moe.h"
#include "engine/cuda/grow_buffer.h"
#include "kernels/cuda/block_copy.cuh"
#include "kernels/cuda/compat.cuh"
#include "kernels/cuda/cublas_linear.h"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/device.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gather_rows.cuh"
#include "kernels/cuda/geglu_softcap.cuh"
#include "kernels/cuda/head_rms_norm.cuh"
#include "kernels/cuda/kv_write.cuh"
#include "kernels/cuda/linear_tiled.cuh"
#include "kernels/cuda/paged_attention.cuh"
#include "kernels/cuda/rms_norm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/silu_mul.cuh"

namespace tessera {
namespace {

namespace kc = kernels::cuda;

kc::ElemType ToElem(DType t) {
  switch (t) {
    case DType::kF16: return kc::ElemType::kF16;
    case DType::kBF16: return kc::ElemType::kBF16;
    default: return kc::ElemType::kF32;
  }
}

// Host-to-device copies through pinned memory: the caller's buffer may be
// reused as soon as CopyFromHost returns, and the copy stays asynchronous.
// Two halves; entering a half waits (event) until the GPU consumed the copies
// issued from it on the previous lap. Loop thread only.
class StagingRing {
 public:
  static constexpr int64_t kHalf = int64_t{8} << 20;
  ~StagingRing() {
    if (host_ != nullptr) cudaFreeHost(host_);
    for (int i = 0; i < 2; ++i) {
      if (event_[i] != nullptr) cudaEventDestroy(event_[i]);
    }
  }
  cudaError_t Init(cudaStream_t stream) {
    stream_ = stream;
    cudaError_t e = cudaMallocHost(reinterpret_cast<void**>(&host_), 2 * kHalf);
    for (int i = 0; i < 2 && e == cudaSuccess; ++i) e = cudaEventCreateWithFlags(&event_[i], cudaEventDisableTiming);
    return e;
  }
  cudaError_t Copy(void* dst, const void* src, int64_t bytes) {
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    while (bytes > 0) {
      const int64_t end = (half_ + 1) * kHalf;
      if (pos_ >= end) {
        cudaError_t e = cudaEventRecord(event_[half_], stream_);
        if (e != cudaSuccess) return e;
        recorded_[half_] = true;
        half_ ^= 1;
        pos_ = half_ * kHalf;
        if (recorded_[half_] && (e = cudaEventSynchronize(event_[half_])) != cudaSuccess) return e;
        continue;
      }
      const int64_t n = std::min(bytes, end - pos_);
      std::memcpy(host_ + pos_, s, static_cast<size_t>(n));
      const cudaError_t e = cudaMemcpyAsync(d, host_ + pos_, static_cast<size_t>(n), cudaMemcpyHostToDevice, stream_);
      if (e != cudaSuccess) return e;
      pos_ = std::min(end, pos_ + (n + 15) / 16 * 16);
      d += n;
      s += n;
      bytes -= n;
    }
    return cudaSuccess;
  }

 private:
  cudaStream_t stream_ = nullptr;
  char* host_ = nullptr;
  cudaEvent_t event_[2] = {nullptr, nullptr};
  bool recorded_[2] = {false, false};
  int half_ = 0;
  int64_t pos_ = 0;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& o) : opt_(o) {}
  ~CudaBackend() override {
    if (stream_ != nullptr) cudaStreamSynchronize(stream_);
    for (cudaGraphExec_t g : graphs_) {
      if (g != nullptr) cudaGraphExecDestroy(g);
    }
    blas_.reset();
    for (void* p : weights_) cudaFree(p);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status Init() {
    if (kc::DeviceCount() == 0) {
      return FailedPrecondition("cuda backend: no CUDA device is available (no GPU or no driver); use --device cpu");
    }
    if (opt_.device < 0 || opt_.device >= kc::DeviceCount()) {
      return InvalidArgument("cuda backend: device " + std::to_string(opt_.device) + " out of range [0, " +
                             std::to_string(kc::DeviceCount()) + ")");
    }
    RETURN_IF_ERROR(Cuda(cudaSetDevice(opt_.device), "cudaSetDevice"));
    RETURN_IF_ERROR(Cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    RETURN_IF_ERROR(Cuda(staging_.Init(stream_), "pinned staging buffer"));
    description_ = kc::DeviceDescription(opt_.device);
    if (!opt_.deterministic) {
      ASSIGN_OR_RETURN(blas_, kc::CublasLinear::Create(stream_));
    }
    return Status::Ok();
  }

  std::string name() const override {
    const std::string mode = opt_.deterministic ? "deterministic" : "cublas";
    return "cuda(" + description_ + ", " + mode + (opt_.cuda_graphs ? ", graphs" : ", eager") + ")";
  }
  DType kv_dtype() const override { return DType::kBF16; }

  StatusOr<WeightView> UploadWeight(const WeightView& host) override {
    if (IsQuantized(host.dtype)) return UploadQuantized(host);
    if (host.dtype != DType::kF32 && host.dtype != DType::kF16 && host.dtype != DType::kBF16) {
      return InvalidArgument("cuda backend: weight dtype " + std::string(DTypeName(host.dtype)) + " is not supported");
    }
    ASSIGN_OR_RETURN(void* p, AllocateWeight(host.bytes()));
    RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(p, host.data, static_cast<size_t>(host.bytes()), cudaMemcpyHostToDevice,
                                         stream_),
                         "weight upload"));
    RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(stream_), "weight upload"));
    WeightView out = host;
    out.data = p;
    return out;
  }

  StatusOr<std::shared_ptr<void>> Allocate(int64_t bytes) override {
    if (capturing_) return FailedPrecondition("cuda backend: Allocate during graph capture");
    const size_t size = static_cast<size_t>(std::max<int64_t>((bytes + 255) / 256 * 256, 256));
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, size); e != cudaSuccess) {
      cudaGetLastError();
      return ResourceExhausted("cuda backend: cannot allocate " + std::to_string(bytes) + " bytes of device memory (" +
                               cudaGetErrorString(e) + ")");
    }
    RETURN_IF_ERROR(Cuda(cudaMemsetAsync(p, 0, size, stream_), "cudaMemsetAsync"));
    return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
  }

  void CopyFromHost(void* dst, const void* src, int64_t bytes) override {
    if (bytes <= 0) return;
    if (capturing_) return Record(FailedPrecondition("cuda backend: CopyFromHost during graph capture"));
    Check(staging_.Copy(dst, src, bytes), "CopyFromHost");
  }
  void CopyToHost(void* dst, const void* src, int64_t bytes) override {
    if (bytes <= 0) return;
    Check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, stream_), "CopyToHost");
    Check(cudaStreamSynchronize(stream_), "CopyToHost (synchronize)");
  }
  void CopyWithinDevice(void* dst, const void* src, int64_t bytes) override {
    if (bytes <= 0) return;
    Check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, stream_),
          "CopyWithinDevice");
  }
  void CopyBlocks(const std::vector<void*>& bases, int64_t block_bytes,
                  const std::vector<std::pair<int64_t, int64_t>>& pairs) override {
    if (bases.empty() || pairs.empty()) return;
    if (block_bytes % 16 != 0) return Backend::CopyBlocks(bases, block_bytes, pairs);
    std::vector<int64_t> flat;
    for (const auto& [s, d] : pairs) {
      flat.push_back(s);
      flat.push_back(d);
    }
    const int64_t base_bytes = static_cast<int64_t>(bases.size() * sizeof(void*));
    const int64_t pair_bytes = static_cast<int64_t>(flat.size() * 8);
    if (!Check(copy_meta_.Ensure(base_bytes + pair_bytes), "CopyBlocks scratch")) return;
    char* meta = static_cast<char*>(copy_meta_.p);
    CopyFromHost(meta, bases.data(), base_bytes);
    CopyFromHost(meta + base_bytes, flat.data(), pair_bytes);
    Check(kc::CopyBlocks(reinterpret_cast<void* const*>(meta), static_cast<int64_t>(bases.size()), block_bytes,
                         reinterpret_cast<const int64_t*>(meta + base_bytes), static_cast<int64_t>(pairs.size()),
                         stream_),
          "CopyBlocks");
  }
  void GatherRows(const float* src, int64_t cols, const int32_t* idx, int64_t n, float* dst) override {
    Check(kc::GatherRows(src, cols, idx, n, dst, stream_), "GatherRows");
  }

  void Embedding(const WeightView& t, const int32_t* ids, int64_t n, float* out) override {
    Check(kc::Embedding(t.data, ToElem(t.dtype), t.cols, ids, n, out, stream_), "Embedding");
  }
  void Linear(const float* x, int64_t m, const WeightView& w, const float* bias, float* y, int64_t ldy) override {
    if (m <= 0) return;
    if (blas_ != nullptr) {
      // (Model runs every shape eagerly before capturing it, so the conversion
      // scratch never grows, i.e. never cudaMallocs, inside a capture.)
      Status s = blas_->Linear(x, m, w.cols, w.data, ToElem(w.dtype), w.rows, bias, y, ldy);
      if (!s.ok()) Record(std::move(s));
      return;
    }
    Check(kc::LinearTiled(x, m, w.cols, w.data, ToElem(w.dtype), w.rows, bias, y, ldy, stream_), "LinearTiled");
  }
  void RmsNorm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* out) override {
    Check(kc::RmsNorm(x, w, rows, dim, eps, out, stream_), "RmsNorm");
  }
  Status CheckHeadDim(int64_t head_dim) const override {
    if (head_dim % 32 != 0 || head_dim > 256) {
      return InvalidArgument("cuda backend: head_dim " + std::to_string(head_dim) +
                             " is not supported (the attention kernels need a multiple of 32, at most 256)");
    }
    return Status::Ok();
  }
  void HeadRmsNorm(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t x_stride, const float* w,
                   float eps) override {
    Check(kc::HeadRmsNorm(x, tokens, heads, head_dim, x_stride, w, eps, stream_), "HeadRmsNorm");
  }
  void AddRmsNorm(float* residual, const float* x, const float* w, int64_t rows, int64_t dim, float eps,
                  float* out) override {
    Check(kc::AddRmsNorm(residual, x, w, rows, dim, eps, out, stream_), "AddRmsNorm");
  }
  void SiluMul(const float* gate_up, int64_t rows, int64_t inter, float* out) override {
    Check(kc::SiluMul(gate_up, rows, inter, out, stream_), "SiluMul");
  }
  Status CheckOp(BackendOp op) const override {
    switch (op) {
      // gpt-oss's ops have no CUDA kernels yet: such a model is refused at load, by op.
      case BackendOp::kAttentionSinks: case BackendOp::kMoeSoftmaxTopK: case BackendOp::kMoeExpertBias:
      case BackendOp::kSwigluOai: case BackendOp::kAdd: case BackendOp::kMoeGroupedRoute:
        return Unimplemented(name() + ": no " + BackendOpName(op) + " kernel");
      case BackendOp::kMlaAttention:
        return Unimplemented("--device cuda has no multi-head latent attention kernel yet; serve the model with "
                             "--device cpu");
      default:
        return Status::Ok();  // kernels/cuda/geglu_softcap.cu, paged_attention.cu
    }
  }
  void GeluTanhMul(const float* gate_up, int64_t rows, int64_t inter, float* out) override {
    Check(kc::GeluTanhMul(gate_up, rows, inter, out, stream_), "GeluTanhMul");
  }
  void Scale(float* x, int64_t n, float s) override { Check(kc::Scale(x, n, s, stream_), "Scale"); }
  void SoftCap(float* x, int64_t n, float cap) override { Check(kc::SoftCap(x, n, cap, stream_), "SoftCap"); }
  void Rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t x_stride, int64_t rot_dim,
            const int32_t* positions, const float* cos_sin) override {
    Check(kc::Rope(x, tokens, heads, head_dim, x_stride, rot_dim, positions, cos_sin, stream_), "Rope");
  }
  void WriteKv(const float* k, int64_t k_stride, const float* v, int64_t v_stride, int64_t tokens, int64_t kv_heads,
               int64_t head_dim, const int64_t* slots, KvLayerView c) override {
    Check(kc::WriteKv(k, k_stride, v, v_stride, tokens, kv_heads, head_dim, slots, c.k, c.v, ToElem(c.dtype),
                      stream_),
          "WriteKv");
  }
  void Attention(const float* q, int64_t q_stride, KvLayerView c, const AttentionParams& p, float* out) override;

  Status CheckMoe() const override { return Status::Ok(); }
  void MoeRoute(const float* logits, int64_t tokens, const MoeRouteParams& p, int32_t* topk_ids,
                float* topk_weights) override {
    // Only the plain softmax runs here: the other variants are refused at load
    // (CheckOp(kMoeSoftmaxTopK / kMoeGroupedRoute)).
    Keep(moe_.Route(MoeEnv(), logits, tokens, p.num_experts, p.top_k, p.renormalize, topk_ids, topk_weights));
  }
  void MoeExperts(const float* x, int64_t tokens, const int32_t* topk_ids, const float* topk_weights, int64_t top_k,
                  const MoeExpertWeights& w, float* out) override {
    Keep(moe_.Experts(MoeEnv(), x, tokens, topk_ids, topk_weights, top_k, w, out));
  }
  void MoeCountExperts(const int32_t* topk_ids, int64_t n, int64_t num_experts, int64_t* counts) override {
    Keep(moe_.CountExperts(MoeEnv(), topk_ids, n, num_experts, counts));
  }
  void SigmoidGateAdd(float* out, const float* shared, const float* gate_logits, int64_t rows,
                      int64_t dim) override {
    Keep(moe_.SigmoidGateAdd(MoeEnv(), out, shared, gate_logits, rows, dim));
  }

  Status TakeError() override {
    Status s = std::move(error_);
    error_ = Status::Ok();
    return s;
  }
  bool MemoryInfo(int64_t* total, int64_t* free) override {
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    *total = static_cast<int64_t>(t);
    *free = static_cast<int64_t>(f);
    return true;
  }

  bool SupportsGraphs() const override { return opt_.cuda_graphs; }
  Status BeginCapture() override {
    if (!opt_.cuda_graphs) return Unimplemented(name() + ": CUDA graphs are off");
    if (capturing_) return FailedPrecondition("cuda backend: capture already in progress");
    RETURN_IF_ERROR(TakeError());
    RETURN_IF_ERROR(Cuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture"));
    capturing_ = true;
    return Status::Ok();
  }
  StatusOr<int64_t> EndCapture() override {
    if (!capturing_) return FailedPrecondition("cuda backend: EndCapture without BeginCapture");
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
    Status recorded = TakeError();
    if (end != cudaSuccess || !recorded.ok()) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      cudaGetLastError();
      return !recorded.ok() ? recorded : Cuda(end, "cudaStreamEndCapture");
    }
    cudaGraphExec_t exec = nullptr;
    const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    RETURN_IF_ERROR(Cuda(inst, "cudaGraphInstantiate"));
    graphs_.push_back(exec);
    return static_cast<int64_t>(graphs_.size() - 1);
  }
  Status Replay(int64_t g) override {
    if (g < 0 || g >= static_cast<int64_t>(graphs_.size()) || graphs_[g] == nullptr) {
      return InvalidArgument("cuda backend: unknown graph " + std::to_string(g));
    }
    return Cuda(cudaGraphLaunch(graphs_[g], stream_), "cudaGraphLaunch");
  }
  void ReleaseGraph(int64_t g) override {
    if (g < 0 || g >= static_cast<int64_t>(graphs_.size()) || graphs_[g] == nullptr) return;
    cudaStreamSynchronize(stream_);
    cudaGraphExecDestroy(graphs_[g]);
    graphs_[g] = nullptr;
  }

 private:
  // Device memory for one weight, owned by the backend until it is destroyed.
  StatusOr<void*> AllocateWeight(int64_t bytes) {
    void* p = nullptr;
    RETURN_IF_ERROR(Cuda(cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 16))),
                         ("cudaMalloc of a " + std::to_string(bytes) + "-byte weight").c_str()));
    weights_.push_back(p);
    return p;
  }

  // No quantized GEMM kernels on the GPU yet: a quantized weight is held as bf16.
  // Its raw blocks are copied to a temporary device buffer and widened there
  // (kc::Dequantize: DequantizeRow's f32 values exactly, rounded to bf16), so the
  // host does no per-element work; the temporary is freed before returning.
  StatusOr<WeightView> UploadQuantized(const WeightView& host) {
    const int64_t raw = DTypeRowBytes(host.dtype, host.cols);
    if (raw < 0 || host.rows < 0) {
      return InvalidArgument("cuda backend: a " + std::string(DTypeName(host.dtype)) + " weight of " +
                             std::to_string(host.cols) + " columns (not a multiple of its " +
                             std::to_string(DTypeBlockElems(host.dtype)) + "-element block)");
    }
    WeightView out = host;
    out.dtype = DType::kBF16;
    ASSIGN_OR_RETURN(void* p, AllocateWeight(out.bytes()));
    void* blocks = nullptr;
    RETURN_IF_ERROR(Cuda(cudaMalloc(&blocks, static_cast<size_t>(std::max<int64_t>(host.bytes(), 16))),
                         ("cudaMalloc of " + std::to_string(host.bytes()) + " bytes of quantized blocks").c_str()));
    Status s = Cuda(cudaMemcpyAsync(blocks, host.data, static_cast<size_t>(host.bytes()), cudaMemcpyHostToDevice,
                                    stream_),
                    "quantized weight upload");
    if (s.ok()) {
      s = Cuda(kc::Dequantize(blocks, host.dtype, host.rows * host.cols, p, kc::ElemType::kBF16, stream_),
               "Dequantize");
    }
    if (s.ok()) s = Cuda(cudaStreamSynchronize(stream_), "quantized weight upload");
    cudaFree(blocks);
    RETURN_IF_ERROR(s);
    out.data = p;
    return out;
  }

  Status Cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::Ok();
    cudaGetLastError();
    return Internal(std::string("cuda backend: ") + what + ": " + cudaGetErrorString(e));
  }
  bool Check(cudaError_t e, const char* op) {
    if (e == cudaSuccess) return true;
    Record(Cuda(e, op));
    return false;
  }
  void Record(Status s) {
    if (error_.ok()) error_ = std::move(s);
  }
  void Keep(Status s) {
    if (!s.ok()) Record(std::move(s));
  }
  CudaMoe::Env MoeEnv() const { return {stream_, blas_.get(), capturing_}; }

  const CudaBackendOptions opt_;
  std::string description_;
  cudaStream_t stream_ = nullptr;
  StagingRing staging_;
  std::unique_ptr<kc::CublasLinear> blas_;  // null: LinearTiled
  std::vector<void*> weights_;              // device weight buffers, freed with the backend
  GrowBuffer attn_ws_, tiles_, copy_meta_;
  CudaMoe moe_;                             // MoE scratch and expert pointer tables
  std::vector<kc::PrefillTile> host_tiles_;  // last tiles uploaded to tiles_
  std::vector<kc::PrefillTile> plan_;
  std::vector<int32_t> seq_count_;
  std::vector<cudaGraphExec_t> graphs_;
  bool capturing_ = false;
  Status error_;
};

void CudaBackend::Attention(const float* q, int64_t q_stride, KvLayerView c, const AttentionParams& p, float* out) {
  const int64_t t = p.num_tokens;
  if (t <= 0) return;
  kc::PagedAttentionArgs a;
  a.q = q;
  a.q_stride = q_stride;
  a.k_cache = c.k;
  a.v_cache = c.v;
  a.cache_type = ToElem(c.dtype);
  a.num_tokens = t;
  a.num_q_heads = p.num_q_heads;
  a.num_kv_heads = p.num_kv_heads;
  a.head_dim = p.head_dim;
  a.block_size = p.block_size;
  a.positions = p.positions;
  a.token_to_seq = p.token_to_seq;
  a.block_tables = p.block_tables;
  a.max_blocks_per_seq = p.max_blocks_per_seq;
  a.sliding_window = p.sliding_window;
  a.scale = p.scale;
  a.softcap = p.softcap;
  a.out = out;
  a.max_context = p.max_context;

  // Decode kernel when every sequence has one token here (or always, in the
  // deterministic mode); otherwise tiles of consecutive tokens of one sequence.
  bool decode = opt_.deterministic || p.host_token_to_seq == nullptr || p.host_positions == nullptr;
  if (!decode) {
    int32_t max_seq = 0;
    for (int64_t i = 0; i < t; ++i) max_seq = std::max(max_seq, p.host_token_to_seq[i]);
    seq_count_.assign(static_cast<size_t>(max_seq) + 1, 0);
    decode = true;
    for (int64_t i = 0; i < t && decode; ++i) decode = ++seq_count_[p.host_token_to_seq[i]] == 1;
  }
  if (decode) {
    const int64_t ws = kc::PagedAttentionWorkspaceBytes(t, p.num_q_heads, p.head_dim, p.max_context);
    if (ws > attn_ws_.bytes && capturing_) {
      return Record(FailedPrecondition("cuda backend: attention workspace would grow during graph capture"));
    }
    if (!Check(attn_ws_.Ensure(ws), "attention workspace")) return;
    a.workspace = attn_ws_.p;
    a.workspace_bytes = attn_ws_.bytes;
    Check(kc::PagedAttentionDecode(a, stream_), "PagedAttentionDecode");
    return;
  }
  plan_.clear();
  for (int64_t i = 0; i < t; ++i) {
    kc::PrefillTile* last = plan_.empty() ? nullptr : &plan_.back();
    if (last != nullptr && last->num_tokens < kc::kPrefillTileQ &&
        p.host_token_to_seq[i] == p.host_token_to_seq[i - 1] && p.host_positions[i] == p.host_positions[i - 1] + 1) {
      ++last->num_tokens;
    } else {
      plan_.push_back({static_cast<int32_t>(i), 1});
    }
  }
  // Every layer of a step plans the same tiles: upload only when they change.
  const bool same = plan_.size() == host_tiles_.size() &&
                    std::memcmp(plan_.data(), host_tiles_.data(), plan_.size() * sizeof(kc::PrefillTile)) == 0;
  if (!same) {
    const int64_t bytes = static_cast<int64_t>(plan_.size() * sizeof(kc::PrefillTile));
    if (!Check(tiles_.Ensure(bytes), "prefill tiles")) return;
    CopyFromHost(tiles_.p, plan_.data(), bytes);
    host_tiles_ = plan_;
  }
  Check(kc::PagedAttentionPrefill(a, static_cast<const kc::PrefillTile*>(tiles_.p),
                                  static_cast<int64_t>(plan_.size()), stream_),
        "PagedAttentionPrefill");
}

}  // namespace

StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const CudaBackendOptions& options) {
  if (!(options.gpu_memory_utilization > 0.0 && options.gpu_memory_utilization <= 1.0)) {
    return InvalidArgument("cuda backend: gpu_memory_utilization must be in (0, 1], got " +
                           std::to_string(options.gpu_memory_utilization));
  }
  auto b = std::make_unique<CudaBackend>(options);
  RETURN_IF_ERROR(b->Init());
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace tessera
