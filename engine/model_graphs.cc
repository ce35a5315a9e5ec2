// Model: decode steps as captured graphs (CUDA graphs), and the profiling run
// that sizes the KV pool. See model.h.
#include <algorithm>
#include <string>
#include <utility>


#include "engine/model.h"
#include "common/log.h"

namespace tessera {

std::vector<int64_t> Model::GraphBatchSizes(int64_t max_num_seqs) {
  static constexpr int64_t kSizes[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256};
  const int64_t cap = std::min<int64_t>(max_num_seqs, 256);
  std::vector<int64_t> out;
  for (int64_t s : kSizes) {
    if (s < cap) out.push_back(s);
  }
  if (cap >= 1) out.push_back(cap);
  return out;
}

Status Model::EnableGraphs(int64_t max_num_seqs, int64_t max_model_len, int64_t block_size) {
  if (!backend_->SupportsGraphs()) return Unimplemented(backend_->name() + " cannot capture graphs");
  if (max_num_seqs <= 0 || max_model_len <= 0 || block_size <= 0) {
    return InvalidArgument("graphs: max_num_seqs, max_model_len and block_size must be positive");
  }
  ReleaseGraphs();
  Graphs& g = graphs_;
  g.sizes = GraphBatchSizes(max_num_seqs);
  g.handles.assign(g.sizes.size(), -1);
  g.width = (max_model_len + block_size - 1) / block_size;
  g.max_model_len = max_model_len;
  const int64_t n = g.sizes.back();
  // Fixed addresses for every step input: [slots i64 | ids | positions | seqs | rows | tables].
  const int64_t bytes = n * 8 + 4 * n * 4 + n * g.width * 4 + 64;
  ASSIGN_OR_RETURN(g.meta, backend_->Allocate(bytes));
  char* base = static_cast<char*>(g.meta.get());
  g.slots = reinterpret_cast<int64_t*>(base);
  g.ids = reinterpret_cast<int32_t*>(base + n * 8);
  g.positions = g.ids + n;
  g.seqs = g.positions + n;
  g.rows = g.seqs + n;
  g.tables = g.rows + n;
  // The RoPE table must not move once a graph has captured its address.
  RETURN_IF_ERROR(EnsureRope(max_model_len));
  g.enabled = true;
  std::string sizes;
  for (int64_t s : g.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(s);
  LogInfo("graphs: decode batches of {} tokens are captured on first use (block tables {} wide)", sizes,
          g.width);
  return Status::Ok();
}

int64_t Model::num_captured_graphs() const {
  return std::count_if(graphs_.handles.begin(), graphs_.handles.end(), [](int64_t h) { return h >= 0; });
}

void Model::ReleaseGraphs() {
  for (int64_t& h : graphs_.handles) {
    if (h >= 0) backend_->ReleaseGraph(h);
    h = -1;
  }
}

int64_t Model::GraphSlot(const ForwardBatch& b) const {
  const Graphs& g = graphs_;
  const int64_t t = b.num_tokens();
  if (g.sizes.empty() || t > g.sizes.back() || t != b.num_seqs) return -1;
  if (static_cast<int64_t>(b.logits_indices.size()) > t) return -1;
  std::vector<char> seen(static_cast<size_t>(b.num_seqs), 0);
  for (int64_t i = 0; i < t; ++i) {
    const int32_t s = b.token_to_seq[i];
    if (seen[s]++ != 0 || b.positions[i] >= g.max_model_len) return -1;  // not one token per sequence
    for (int64_t c = g.width; c < b.max_blocks_per_seq; ++c) {
      if (b.block_tables[s * b.max_blocks_per_seq + c] >= 0) return -1;
    }
  }
  return std::lower_bound(g.sizes.begin(), g.sizes.end(), t) - g.sizes.begin();
}

Status Model::ForwardGraph(const ForwardBatch& b, int64_t slot, KvCache* cache, std::vector<float>* logits) {
  Graphs& g = graphs_;
  const int64_t t = b.num_tokens(), n = g.sizes[slot], w = g.width;
  const int64_t rows = static_cast<int64_t>(b.logits_indices.size());
  if (g.cache != cache) {
    ReleaseGraphs();
    g.cache = cache;
  }
  RETURN_IF_ERROR(EnsureWorkspace(n, n));
  // Padding tokens: id 0, position -1 (RoPE, KV write and attention skip them),
  // slot -1, a block-table row of their own with no blocks.
  g.h_ids.assign(n, 0);
  g.h_positions.assign(n, -1);
  g.h_slots.assign(n, -1);
  g.h_seqs.resize(n);
  g.h_rows.assign(n, 0);
  g.h_tables.assign(n * w, -1);
  for (int64_t i = 0; i < n; ++i) g.h_seqs[i] = static_cast<int32_t>(i);
  for (int64_t i = 0; i < t; ++i) {
    g.h_ids[i] = b.token_ids[i];
    g.h_positions[i] = b.positions[i];
    g.h_slots[i] = b.slot_mapping[i];
    const int32_t* src = &b.block_tables[b.token_to_seq[i] * b.max_blocks_per_seq];
    std::copy(src, src + std::min(w, b.max_blocks_per_seq), &g.h_tables[i * w]);
  }
  std::copy(b.logits_indices.begin(), b.logits_indices.end(), g.h_rows.begin());
  backend_->CopyFromHost(g.slots, g.h_slots.data(), n * 8);
  backend_->CopyFromHost(g.ids, g.h_ids.data(), n * 4);
  backend_->CopyFromHost(g.positions, g.h_positions.data(), n * 4);
  backend_->CopyFromHost(g.seqs, g.h_seqs.data(), n * 4);
  backend_->CopyFromHost(g.rows, g.h_rows.data(), n * 4);
  backend_->CopyFromHost(g.tables, g.h_tables.data(), n * w * 4);
  d_slots_ = g.slots;
  d_ids_ = g.ids;
  d_positions_ = g.positions;
  d_token_to_seq_ = g.seqs;
  d_block_tables_ = g.tables;
  d_logit_rows_ = g.rows;
  step_max_blocks_ = w;
  step_host_positions_ = g.h_positions.data();
  step_host_token_to_seq_ = g.h_seqs.data();
  step_max_context_ = g.max_model_len;  // the split-K grid covers any context a replay may have

  if (g.handles[slot] < 0) {
    // First time at this size: run it eagerly (this step's result, and every
    // buffer an op needs reaches its size outside the capture), then capture.
    RunLayers(n, n, cache);
    RETURN_IF_ERROR(backend_->TakeError());
    Status s = backend_->BeginCapture();
    if (s.ok()) {
      RunLayers(n, n, cache);
      StatusOr<int64_t> h = backend_->EndCapture();
      if (h.ok()) {
        g.handles[slot] = *h;
      } else {
        s = h.status();
      }
    }
    if (!s.ok()) {
      LogWarn("graphs: capture at batch {} failed ({}); running decode steps eagerly", n, s.ToString());
      ReleaseGraphs();
      g.enabled = false;
    }
  } else {
    RETURN_IF_ERROR(backend_->Replay(g.handles[slot]));
  }
  logits->resize(static_cast<size_t>(rows * config_.vocab_size));
  if (rows > 0) backend_->CopyToHost(logits->data(), ws_.logits.get(), rows * config_.vocab_size * 4);
  return backend_->TakeError();
}

Status Model::ProfileForward(int64_t tokens, int64_t max_num_seqs, int64_t max_model_len, int64_t block_size) {
  if (tokens <= 0 || max_model_len <= 0 || block_size <= 0) {
    return InvalidArgument("profile: tokens, max_model_len and block_size must be positive");
  }
  const int64_t seqs = std::max((tokens + max_model_len - 1) / max_model_len,
                                std::min(std::max<int64_t>(max_num_seqs, 1), tokens));
  std::vector<int64_t> lens(seqs, tokens / seqs);
  for (int64_t i = 0; i < tokens % seqs; ++i) ++lens[i];
  const int64_t width = (*std::max_element(lens.begin(), lens.end()) + block_size - 1) / block_size;
  ForwardBatch b;
  b.num_seqs = seqs;
  b.max_blocks_per_seq = width;
  b.block_tables.assign(seqs * width, -1);
  int64_t next_block = 0;
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t blocks = (lens[s] + block_size - 1) / block_size;
    for (int64_t j = 0; j < blocks; ++j) b.block_tables[s * width + j] = static_cast<int32_t>(next_block++);
    for (int64_t p = 0; p < lens[s]; ++p) {
      b.token_ids.push_back(static_cast<int32_t>((s * 131 + p * 7) % config_.vocab_size));
      b.positions.push_back(static_cast<int32_t>(p));
      b.token_to_seq.push_back(static_cast<int32_t>(s));
      b.slot_mapping.push_back(b.block_tables[s * width + p / block_size] * block_size + p % block_size);
    }
    b.logits_indices.push_back(static_cast<int32_t>(b.token_ids.size() - 1));
  }
  ASSIGN_OR_RETURN(auto cache, CreateKvCache(next_block, block_size));
  std::vector<float> logits;
  const bool graphs = graphs_.enabled;
  graphs_.enabled = false;  // profile the eager path at full width
  Status s = Forward(b, cache.get(), &logits);
  if (s.ok()) {
    // A decode step of the largest graph batch at the last position a sequence
    // may reach: the split-K attention scratch is sized by the context, and a
    // captured graph uses it at max_model_len. Every block-table entry names
    // block 0, so one block of cache serves it.
    const int64_t n = std::min<int64_t>(std::max<int64_t>(max_num_seqs, 1), 256);
    const int64_t w = (max_model_len + block_size - 1) / block_size;
    const int32_t pos = static_cast<int32_t>(max_model_len - 1);
    ForwardBatch d;
    d.num_seqs = n;
    d.max_blocks_per_seq = w;
    d.block_tables.assign(n * w, 0);
    for (int64_t i = 0; i < n; ++i) {
      d.token_ids.push_back(static_cast<int32_t>(i % config_.vocab_size));
      d.positions.push_back(pos);
      d.token_to_seq.push_back(static_cast<int32_t>(i));
      d.slot_mapping.push_back(pos % block_size);
      d.logits_indices.push_back(static_cast<int32_t>(i));
    }
    s = Forward(d, cache.get(), &logits);
  }
  graphs_.enabled = graphs;
  if (moe_) moe_->ResetExpertLoad();  // dummy tokens are not load
  return s;
}

}  // namespace tessera
