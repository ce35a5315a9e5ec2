#include "engine/parallel/shard/model_shard.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kernels/cpu/moe.h"

namespace tessera::parallel {

StatusOr<std::unique_ptr<ModelShard>> ModelShard::Create(const ModelConfig& config, const ParallelSetup& setup,
                                                         Backend* backend) {
  if (setup.comm == nullptr) return InvalidArgument("parallel model: no communicator");
  if (setup.comm->rank() != setup.shard.rank || setup.comm->world_size() != setup.shard.world_size) {
    return InvalidArgument("parallel model: communicator is rank " + std::to_string(setup.comm->rank()) + " of " +
                           std::to_string(setup.comm->world_size()) + ", shard options say rank " +
                           std::to_string(setup.shard.rank) + " of " + std::to_string(setup.shard.world_size));
  }
  if (backend->name().rfind("cpu", 0) != 0 || setup.comm->backend() == "nccl") {
    return Unimplemented("tensor/expert parallelism runs on the CPU backend with in-process or Gloo ranks; "
                         "backend '" + backend->name() + "' with '" + std::string(setup.comm->backend()) +
                         "' collectives is not wired yet");
  }
  auto s = std::unique_ptr<ModelShard>(new ModelShard());
  ASSIGN_OR_RETURN(s->plan_, MakeShardPlan(config, setup.shard));
  s->config_ = config;
  s->local_ = s->plan_.LocalConfig(config);
  s->comm_ = setup.comm;
  s->backend_ = backend;
  s->record_reads_ = setup.record_reads;
  return s;
}

StatusOr<WeightView> ModelShard::LoadMatrix(const WeightSpec& spec, const SourceTensor& t) {
  const TensorSlice sl = SliceFor(plan_, config_, spec);
  const int64_t rows = spec.shape[0], cols = spec.shape[1];
  const WeightView whole{t.data, t.dtype, rows, cols};
  const int64_t row_bytes = DTypeRowBytes(t.dtype, cols);
  std::vector<ByteRange> reads;
  WeightView out;
  using K = TensorSlice::Kind;
  switch (sl.kind) {
    case K::kSkip: return WeightView{};
    case K::kWhole:
      reads.push_back({0, whole.bytes()});
      out = whole;
      break;
    case K::kRows: {
      const auto* src = static_cast<const uint8_t*>(t.data) + sl.range.begin * row_bytes;
      const int64_t n = sl.range.count * row_bytes;
      reads.push_back({sl.range.begin * row_bytes, sl.range.begin * row_bytes + n});
      if (!sl.zero_row) {
        out = {src, t.dtype, sl.range.count, cols};
        break;
      }
      auto buf = std::make_unique<std::vector<uint8_t>>(static_cast<size_t>(n + row_bytes), 0);
      std::memcpy(buf->data(), src, static_cast<size_t>(n));
      out = {buf->data(), t.dtype, sl.range.count + 1, cols};
      owned_.push_back(std::move(buf));
      break;
    }
    case K::kCols: {
      const int64_t block = DTypeBlockElems(t.dtype);
      if (sl.range.begin % block != 0 || sl.range.count % block != 0) {
        return InvalidArgument(t.file + ": tensor '" + spec.name + "' (" + std::string(DTypeName(t.dtype)) +
                               ") cannot be split at column " + std::to_string(sl.range.begin) + " over " +
                               std::to_string(plan_.options.world_size) +
                               " ranks: slices must hold whole quantization blocks of " + std::to_string(block));
      }
      const int64_t off = DTypeRowBytes(t.dtype, sl.range.begin);
      const int64_t n = DTypeRowBytes(t.dtype, sl.range.count);
      auto buf = std::make_unique<std::vector<uint8_t>>(static_cast<size_t>(rows * n));
      const auto* src = static_cast<const uint8_t*>(t.data);
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(buf->data() + r * n, src + r * row_bytes + off, static_cast<size_t>(n));
        if (record_reads_) reads.push_back({r * row_bytes + off, r * row_bytes + off + n});
      }
      out = {buf->data(), t.dtype, rows, sl.range.count};
      owned_.push_back(std::move(buf));
      break;
    }
  }
  if (record_reads_) reads_.push_back({spec.name, whole.bytes(), std::move(reads)});
  return out;
}

Range ModelShard::VectorRange(const WeightSpec& spec) const {
  const TensorSlice sl = SliceFor(plan_, config_, spec);
  switch (sl.kind) {
    case TensorSlice::Kind::kSkip: return {0, 0};
    case TensorSlice::Kind::kRows: return sl.range;
    default: return {0, spec.shape[0]};
  }
}

void ModelShard::Fail(const Status& s) {
  if (error_.ok()) error_ = s;
}

Status ModelShard::TakeError() {
  // A failed collective breaks the communicator, so the error is sticky.
  return error_;
}

template <class Fn>
bool ModelShard::Collective(Fn&& fn) {
  if (!error_.ok()) return false;
  const auto t0 = std::chrono::steady_clock::now();
  Status s = fn();
  collective_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!s.ok()) Fail(s);
  return s.ok();
}

void ModelShard::ReduceSum(float* x, int64_t n) {
  if (n == 0) return;
  Collective([&] { return comm_->AllReduce(x, x, n, DType::kF32); });
}

void ModelShard::Embed(const WeightView& table, const int32_t* host_ids, int64_t t, float* out) {
  const Range v = plan_.vocab;
  local_ids_.resize(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) {
    local_ids_[i] = v.Contains(host_ids[i]) ? static_cast<int32_t>(host_ids[i] - v.begin)
                                            : static_cast<int32_t>(v.count);  // the zero row
  }
  backend_->Embedding(table, local_ids_.data(), t, out);
  ReduceSum(out, t * config_.hidden_size);
}

void ModelShard::LmHead(const float* x, int64_t rows, const WeightView& lm_head, float* logits) {
  const int64_t stride = plan_.vocab_stride, vocab = config_.vocab_size, n = plan_.options.world_size;
  lm_local_.assign(static_cast<size_t>(rows * stride), 0.0f);
  backend_->Linear(x, rows, WeightView{lm_head.data, lm_head.dtype, plan_.vocab.count, lm_head.cols}, nullptr,
                   lm_local_.data(), stride);
  lm_all_.resize(static_cast<size_t>(n * rows * stride));
  if (!Collective([&] { return comm_->AllGather(lm_local_.data(), lm_all_.data(), rows * stride, DType::kF32); })) {
    return;
  }
  for (int r = 0; r < n; ++r) {
    const int64_t b = SliceBegin(vocab, static_cast<int>(n), r), c = SliceCount(vocab, static_cast<int>(n), r);
    for (int64_t row = 0; row < rows; ++row) {
      std::memcpy(logits + row * vocab + b, lm_all_.data() + (r * rows + row) * stride,
                  static_cast<size_t>(c) * sizeof(float));
    }
  }
}

void ModelShard::MoeExperts(const float* x, int64_t t, const int32_t* ids, const float* weights,
                            const MoeExpertWeights& local, float* out) {
  if (plan_.options.data_parallel_attention) {
    DispatchCombine(x, t, ids, weights, local, out);
    return;
  }
  // Hidden states are replicated (TP attention): rank r dispatches tokens
  // [SliceBegin, +SliceCount), then every rank gathers every slice.
  const int n = plan_.options.world_size, r = plan_.options.rank;
  const int64_t h = config_.hidden_size, k = config_.moe.top_k;
  const int64_t b = SliceBegin(t, n, r), c = SliceCount(t, n, r), stride = SliceCount(t, n, 0);
  gather_out_.assign(static_cast<size_t>(std::max<int64_t>(stride, 1) * h), 0.0f);
  DispatchCombine(x + b * h, c, ids + b * k, weights + b * k, local, gather_out_.data());
  if (t == 0) return;
  std::vector<float> all(static_cast<size_t>(n * stride * h));
  if (!Collective([&] { return comm_->AllGather(gather_out_.data(), all.data(), stride * h, DType::kF32); })) return;
  for (int p = 0; p < n; ++p) {
    std::memcpy(out + SliceBegin(t, n, p) * h, all.data() + p * stride * h,
                static_cast<size_t>(SliceCount(t, n, p) * h) * sizeof(float));
  }
}

// One all-to-all round trip: pairs to their experts' ranks and outputs back.
void ModelShard::DispatchCombine(const float* x, int64_t t, const int32_t* ids, const float* weights,
                                 const MoeExpertWeights& local, float* out) {
  const int n = plan_.options.world_size;
  const int64_t h = config_.hidden_size, k = config_.moe.top_k, num_e = config_.moe.num_experts;
  const int64_t pairs = t * k;
  // Pairs grouped by destination rank, in pair order within a rank.
  send_counts_.assign(static_cast<size_t>(n), 0);
  std::vector<int32_t> dest(static_cast<size_t>(pairs));
  for (int64_t p = 0; p < pairs; ++p) {
    dest[p] = plan_.OwnerOfExpert(ids[p], num_e);
    ++send_counts_[dest[p]];
  }
  std::vector<int64_t> fill(static_cast<size_t>(n), 0);
  for (int i = 1; i < n; ++i) fill[i] = fill[i - 1] + send_counts_[i - 1];
  pos_.resize(static_cast<size_t>(pairs));
  send_x_.resize(static_cast<size_t>(pairs * h));
  send_e_.resize(static_cast<size_t>(pairs));
  for (int64_t p = 0; p < pairs; ++p) {
    const int64_t slot = fill[dest[p]]++;
    pos_[p] = static_cast<int32_t>(slot);
    std::memcpy(send_x_.data() + slot * h, x + (p / k) * h, static_cast<size_t>(h) * sizeof(float));
    send_e_[slot] = static_cast<int32_t>(ids[p] - SliceBegin(num_e, n, dest[p]));
  }
  // Counts first (each rank learns how many pairs it receives from each).
  std::vector<int64_t> ones(static_cast<size_t>(n), 1);
  recv_counts_.assign(static_cast<size_t>(n), 0);
  if (!Collective([&] {
        return comm_->AllToAllV(send_counts_.data(), ones, recv_counts_.data(), ones, DType::kI64);
      })) {
    return;
  }
  int64_t in = 0;
  for (int64_t c : recv_counts_) in += c;
  std::vector<int64_t> sx(static_cast<size_t>(n)), rx(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) sx[i] = send_counts_[i] * h, rx[i] = recv_counts_[i] * h;
  recv_x_.resize(static_cast<size_t>(std::max<int64_t>(in * h, 1)));
  recv_e_.resize(static_cast<size_t>(std::max<int64_t>(in, 1)));
  if (!Collective([&] { return comm_->AllToAllV(send_x_.data(), sx, recv_x_.data(), rx, DType::kF32); })) return;
  if (!Collective([&] {
        return comm_->AllToAllV(send_e_.data(), send_counts_, recv_e_.data(), recv_counts_, DType::kI32);
      })) {
    return;
  }
  // Unweighted expert outputs: top_k 1 with weight 1 makes MoeExperts write
  // 1 * y = y exactly, the same y the one-rank kernel combines.
  y_in_.resize(static_cast<size_t>(std::max<int64_t>(in * h, 1)));
  if (in > 0) {
    ones_.assign(static_cast<size_t>(in), 1.0f);
    backend_->MoeExperts(recv_x_.data(), in, recv_e_.data(), ones_.data(), 1, local, y_in_.data());
  }
  y_back_.resize(static_cast<size_t>(std::max<int64_t>(pairs * h, 1)));
  if (!Collective([&] { return comm_->AllToAllV(y_in_.data(), rx, y_back_.data(), sx, DType::kF32); })) return;
  if (t > 0) kernels::cpu::MoeCombine(y_back_.data(), pos_.data(), weights, t, k, h, out, nullptr);
}

}  // namespace tessera::parallel
