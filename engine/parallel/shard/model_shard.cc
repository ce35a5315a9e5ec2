#include "engine/parallel/shard/model_shard.h"
#include "common/log.h"

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
  if (config.moe.expert_bias && s->plan_.expert_inter.count != config.moe.expert_inter) {
    return Unimplemented(config.architecture + ": expert biases with each expert split over tensor-parallel ranks "
                         "are not supported; run its experts with expert parallelism (--enable-expert-parallel)");
  }
  s->local_ = s->plan_.LocalConfig(config);
  s->comm_ = setup.comm;
  s->backend_ = backend;
  s->record_reads_ = setup.record_reads;
  if (s->plan_.expert_parallel()) {
    for (int64_t i = 0; i < config.num_layers; ++i) s->num_moe_layers_ += config.layer_moe[i] ? 1 : 0;
    const int64_t n = setup.shard.world_size, e = config.moe.num_experts;
    if (s->plan_.expert_map()) {
      ASSIGN_OR_RETURN(ExpertMap m, ExpertMap::Initial(static_cast<int>(n), e, setup.shard.eplb.num_redundant_experts));
      s->maps_.assign(static_cast<size_t>(s->num_moe_layers_), m);
      s->initial_ = std::make_unique<ExpertMap>(std::move(m));
      s->received_.assign(static_cast<size_t>(s->num_moe_layers_), std::vector<std::shared_ptr<void>>(e));
    }
    s->slot_pairs_.assign(static_cast<size_t>(s->num_moe_layers_ * s->SlotsPerRank()), 0);
    s->expert_totals_.assign(static_cast<size_t>(s->num_moe_layers_ * e), 0);
    s->expert_rank_totals_.assign(static_cast<size_t>(s->num_moe_layers_ * e * n), 0);
    s->window_sum_.assign(static_cast<size_t>(s->num_moe_layers_ * e), 0);
  }
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

int64_t ModelShard::SlotsPerRank() const {
  if (!maps_.empty()) return maps_[0].slots_per_rank();
  return SliceCount(config_.moe.num_experts, plan_.options.world_size, 0);
}

int64_t ModelShard::LogicalOfSlot(int64_t layer, int rank, int64_t j) const {
  if (!maps_.empty()) return maps_[layer].logical(rank * maps_[layer].slots_per_rank() + j);
  const int64_t e = config_.moe.num_experts;
  const int n = plan_.options.world_size;
  return j < SliceCount(e, n, rank) ? SliceBegin(e, n, rank) + j : -1;
}

std::vector<int64_t> ModelShard::SlotExperts(int64_t layer) const {
  std::vector<int64_t> out;
  for (int64_t j = 0; j < SlotsPerRank(); ++j) {
    const int64_t e = LogicalOfSlot(layer, plan_.options.rank, j);
    if (e >= 0) out.push_back(e);
  }
  return out;
}

void ModelShard::MoeExperts(int64_t layer, const float* x, int64_t t, const int32_t* ids, const float* weights,
                            const MoeExpertWeights& local, float* out) {
  if (plan_.options.data_parallel_attention) {
    DispatchCombine(layer, x, t, ids, weights, local, out);
    return;
  }
  // Hidden states are replicated (TP attention): rank r dispatches tokens
  // [SliceBegin, +SliceCount), then every rank gathers every slice.
  const int n = plan_.options.world_size, r = plan_.options.rank;
  const int64_t h = config_.hidden_size, k = config_.moe.top_k;
  const int64_t b = SliceBegin(t, n, r), c = SliceCount(t, n, r), stride = SliceCount(t, n, 0);
  gather_out_.assign(static_cast<size_t>(std::max<int64_t>(stride, 1) * h), 0.0f);
  DispatchCombine(layer, x + b * h, c, ids + b * k, weights + b * k, local, gather_out_.data());
  if (t == 0) return;
  std::vector<float> all(static_cast<size_t>(n * stride * h));
  if (!Collective([&] { return comm_->AllGather(gather_out_.data(), all.data(), stride * h, DType::kF32); })) return;
  for (int p = 0; p < n; ++p) {
    std::memcpy(out + SliceBegin(t, n, p) * h, all.data() + p * stride * h,
                static_cast<size_t>(SliceCount(t, n, p) * h) * sizeof(float));
  }
}

// One all-to-all round trip: pairs to their experts' ranks and outputs back.
void ModelShard::DispatchCombine(int64_t layer, const float* x, int64_t t, const int32_t* ids, const float* weights,
                                 const MoeExpertWeights& local, float* out) {
  const int n = plan_.options.world_size;
  const int64_t h = config_.hidden_size, k = config_.moe.top_k, num_e = config_.moe.num_experts;
  const int64_t pairs = t * k;
  // Pairs grouped by destination rank, in pair order within a rank; each
  // pair's slot on that rank. With a map: the least-loaded replica.
  send_counts_.assign(static_cast<size_t>(n), 0);
  std::vector<int32_t> dest(static_cast<size_t>(pairs)), dest_slot(static_cast<size_t>(pairs));
  for (int64_t p = 0; p < pairs; ++p) {
    if (maps_.empty()) {
      dest[p] = plan_.OwnerOfExpert(ids[p], num_e);
      dest_slot[p] = static_cast<int32_t>(ids[p] - SliceBegin(num_e, n, dest[p]));
    } else {
      const ExpertMap& m = maps_[layer];
      const int64_t slot = m.Choose(ids[p], &send_counts_);  // counts the pair for its rank
      dest[p] = m.RankOfSlot(slot);
      dest_slot[p] = static_cast<int32_t>(slot - dest[p] * m.slots_per_rank());
      continue;
    }
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
    send_e_[slot] = dest_slot[p];
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
  const int64_t spr = SlotsPerRank();
  for (int64_t i = 0; i < in; ++i) ++slot_pairs_[layer * spr + recv_e_[i]];
  y_in_.resize(static_cast<size_t>(std::max<int64_t>(in * h, 1)));
  if (in > 0) {
    ones_.assign(static_cast<size_t>(in), 1.0f);
    backend_->MoeExperts(recv_x_.data(), in, recv_e_.data(), ones_.data(), 1, local, y_in_.data());
  }
  y_back_.resize(static_cast<size_t>(std::max<int64_t>(pairs * h, 1)));
  if (!Collective([&] { return comm_->AllToAllV(y_in_.data(), rx, y_back_.data(), sx, DType::kF32); })) return;
  if (t > 0) kernels::cpu::MoeCombine(y_back_.data(), pos_.data(), weights, t, k, h, out, nullptr);
}

void ModelShard::FinishStep(bool* rebalance) {
  *rebalance = false;
  if (!plan_.expert_parallel() || !error_.ok()) return;
  const int n = plan_.options.world_size;
  const int64_t spr = SlotsPerRank(), e = config_.moe.num_experts, per_rank = num_moe_layers_ * spr;
  std::vector<int64_t> all(static_cast<size_t>(n * per_rank));
  if (!Collective([&] { return comm_->AllGather(slot_pairs_.data(), all.data(), per_rank, DType::kI64); })) return;
  std::fill(slot_pairs_.begin(), slot_pairs_.end(), 0);
  std::vector<int64_t> step(static_cast<size_t>(num_moe_layers_ * e), 0), rank_pairs(static_cast<size_t>(n), 0);
  for (int r = 0; r < n; ++r) {
    for (int64_t l = 0; l < num_moe_layers_; ++l) {
      for (int64_t j = 0; j < spr; ++j) {
        const int64_t c = all[r * per_rank + l * spr + j], x = LogicalOfSlot(l, r, j);
        if (c == 0 || x < 0) continue;
        step[l * e + x] += c;
        expert_rank_totals_[(l * e + x) * n + r] += c;
        rank_pairs[r] += c;
      }
    }
  }
  for (size_t i = 0; i < step.size(); ++i) expert_totals_[i] += step[i];
  const int64_t most = *std::max_element(rank_pairs.begin(), rank_pairs.end());
  int64_t sum = 0;
  for (int64_t c : rank_pairs) sum += c;
  last_imbalance_ = sum == 0 ? 0.0 : static_cast<double>(most) * n / static_cast<double>(sum);
  const EplbOptions& o = plan_.options.eplb;
  if (o.log_balancedness && plan_.options.rank == 0 && sum > 0) {
    LogInfo("eplb: step {}: pairs per rank mean {:.1f}, max {} (max/mean {:.3f})", steps_ + 1,
            static_cast<double>(sum) / n, most, last_imbalance_);
  }
  if (maps_.empty()) return;
  // The window: the last window_size steps' loads (a ring), summed.
  const size_t w = static_cast<size_t>(o.window_size);
  if (window_.size() < w) {
    window_.push_back(step);
  } else {
    std::vector<int64_t>& old = window_[static_cast<size_t>(steps_) % w];
    for (size_t i = 0; i < step.size(); ++i) window_sum_[i] -= old[i];
    old = step;
  }
  for (size_t i = 0; i < step.size(); ++i) window_sum_[i] += step[i];
  ++steps_;
  *rebalance = o.enabled && steps_ % o.step_interval == 0;
}

StatusOr<std::vector<ExpertMap>> ModelShard::BroadcastMaps() {
  const int n = plan_.options.world_size;
  const int64_t e = config_.moe.num_experts, r = plan_.options.eplb.num_redundant_experts, slots = e + r;
  std::vector<int64_t> words(static_cast<size_t>(num_moe_layers_ * slots));
  if (plan_.options.rank == 0) {
    for (int64_t l = 0; l < num_moe_layers_; ++l) {
      const std::vector<int64_t> load(window_sum_.begin() + l * e, window_sum_.begin() + (l + 1) * e);
      ASSIGN_OR_RETURN(ExpertMap m, ExpertMap::Balanced(n, e, r, load));
      std::copy(m.logical_slots().begin(), m.logical_slots().end(), words.begin() + l * slots);
    }
  }
  if (!Collective([&] { return comm_->Broadcast(words.data(), num_moe_layers_ * slots, DType::kI64, 0); })) {
    return error_;
  }
  std::vector<ExpertMap> maps;
  for (int64_t l = 0; l < num_moe_layers_; ++l) {
    ASSIGN_OR_RETURN(ExpertMap m, ExpertMap::FromLogical(n, e, std::vector<int64_t>(words.begin() + l * slots,
                                                                                   words.begin() + (l + 1) * slots)));
    maps.push_back(std::move(m));
  }
  return maps;
}

// Moving one layer's experts. Every rank derives the same transfer list from
// the old and new maps: rank d needs expert x when a new slot of d holds x and
// d holds x neither in an old slot nor from the start; the lowest rank with x
// in an old slot sends it (gate, up, down bytes and the expert's biases, if any,
// padded to 4-byte words).
Status ModelShard::Rebalance(const std::vector<MoeExpertWeights*>& tables) {
  if (maps_.empty()) return Status::Ok();
  if (!error_.ok()) return error_;
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::vector<ExpertMap> next, BroadcastMaps());
  const int n = plan_.options.world_size, me = plan_.options.rank;
  const int64_t num_e = config_.moe.num_experts;
  int64_t moved = 0;
  std::vector<double> before, after;
  for (int64_t l = 0; l < num_moe_layers_; ++l) {
    const ExpertMap &old = maps_[l], &neu = next[l];
    MoeExpertWeights& tab = *tables[l];
    const std::vector<int64_t> load(window_sum_.begin() + l * num_e, window_sum_.begin() + (l + 1) * num_e);
    before.push_back(old.Imbalance(load));
    after.push_back(neu.Imbalance(load));
    // Template views (shape and dtype) from any expert this rank holds.
    int64_t any = 0;
    while (tab.gate[any].empty()) ++any;
    std::vector<std::vector<WeightView>*> parts;  // the expert's matrices and biases, in packing order
    std::vector<WeightView> tmpl;
    std::vector<int64_t> offset;  // of each part, 64-byte aligned (f32 biases follow quantized rows)
    int64_t bytes = 0;
    for (std::vector<WeightView>* table : tab.Tables()) {
      if (table->empty()) continue;
      parts.push_back(table);
      tmpl.push_back((*table)[any]);
      offset.push_back((bytes + 63) / 64 * 64);
      bytes = offset.back() + tmpl.back().bytes();
    }
    const int64_t words = (bytes + 3) / 4;
    auto needs = [&](int d) {  // ascending experts rank d must receive
      std::vector<int64_t> out;
      for (int64_t x = 0; x < num_e; ++x) {
        if (neu.RankHolds(d, x) && !old.RankHolds(d, x) && !initial_->RankHolds(d, x)) out.push_back(x);
      }
      return out;
    };
    auto source = [&](int64_t x) {
      for (int r = 0; r < n; ++r) {
        if (old.RankHolds(r, x)) return r;
      }
      return 0;
    };
    std::vector<int64_t> send_counts(static_cast<size_t>(n), 0), recv_counts(static_cast<size_t>(n), 0);
    std::vector<int32_t> send;
    for (int d = 0; d < n; ++d) {
      for (int64_t x : needs(d)) {
        ++moved;
        if (source(x) != me) continue;
        const size_t at = send.size();
        send.resize(at + static_cast<size_t>(words), 0);
        auto* p = reinterpret_cast<uint8_t*>(send.data() + at);
        for (size_t k = 0; k < parts.size(); ++k) {
          std::memcpy(p + offset[k], (*parts[k])[x].data, static_cast<size_t>(tmpl[k].bytes()));
        }
        send_counts[d] += words;
      }
    }
    const std::vector<int64_t> mine = needs(me);
    for (int64_t x : mine) recv_counts[source(x)] += words;
    std::vector<int32_t> recv(std::max<size_t>(mine.size() * static_cast<size_t>(words), 1));
    if (send.empty()) send.resize(1);
    if (!Collective([&] {
          return comm_->AllToAllV(send.data(), send_counts, recv.data(), recv_counts, DType::kI32);
        })) {
      return error_;
    }
    // Received experts arrive grouped by source rank, ascending within one.
    std::vector<std::shared_ptr<void>>& held = received_[l];
    int64_t at = 0;
    for (int p = 0; p < n; ++p) {
      for (int64_t x : mine) {
        if (source(x) != p) continue;
        ASSIGN_OR_RETURN(std::shared_ptr<void> buf, backend_->Allocate(bytes));
        std::memcpy(buf.get(), recv.data() + at * words, static_cast<size_t>(bytes));
        auto* b = static_cast<const uint8_t*>(buf.get());
        for (size_t k = 0; k < parts.size(); ++k) {
          (*parts[k])[x] = {b + offset[k], tmpl[k].dtype, tmpl[k].rows, tmpl[k].cols};
        }
        held[x] = std::move(buf);
        ++at;
      }
    }
    // Replicas received earlier that this rank no longer holds.
    for (int64_t x = 0; x < num_e; ++x) {
      if (!held[x] || neu.RankHolds(me, x)) continue;
      held[x].reset();
      for (std::vector<WeightView>* table : parts) (*table)[x] = WeightView{};
    }
  }
  maps_ = std::move(next);
  ++rebalances_;
  experts_moved_ += moved;
  if (me == 0) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    auto worst = [](const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); };
    LogInfo("eplb: rebalance {} after step {}: max/mean pairs per rank over the window (worst layer) "
            "{:.3f} -> {:.3f}; {} expert copies moved between ranks ({:.1f} ms on rank 0)",
            rebalances_, steps_, worst(before), worst(after), moved, ms);
  }
  return Status::Ok();
}

}  // namespace tessera::parallel
