#include "runtime/spec/draft_model_proposer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/spec/acceptance.h"

namespace tessera {
namespace {

// tokenizer.json of an HF directory, or "" (GGUF files, no tokenizer file).
std::string ReadTokenizer(const std::string& path) {
  const std::filesystem::path p = std::filesystem::path(path) / "tokenizer.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) return "";
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// Appends one sequence's tokens [from, to) to a draft batch; INTERNAL (the
// step falls back to plain decode) if its block table does not cover them.
Status AddRows(ForwardBatch* b, const DraftInput& in, std::span<const int32_t> tokens, int64_t from,
               int64_t block_size, bool want_logits) {
  const int64_t last = from + static_cast<int64_t>(tokens.size()) - 1;
  if (last / block_size >= static_cast<int64_t>(in.block_ids.size())) {
    return Internal("draft model: position " + std::to_string(last) + " of sequence " + std::to_string(in.seq_id) +
                    " is past its " + std::to_string(in.block_ids.size()) + " blocks");
  }
  const int32_t row = static_cast<int32_t>(b->num_seqs++);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t pos = from + static_cast<int64_t>(i);
    b->token_ids.push_back(tokens[i]);
    b->positions.push_back(static_cast<int32_t>(pos));
    b->token_to_seq.push_back(row);
    b->slot_mapping.push_back(static_cast<int64_t>(in.block_ids[pos / block_size]) * block_size + pos % block_size);
  }
  if (want_logits) b->logits_indices.push_back(static_cast<int32_t>(b->token_ids.size() - 1));
  return Status::Ok();
}

// Fills block_tables for the sequences added, in order.
void FinishBatch(ForwardBatch* b, const std::vector<const DraftInput*>& rows) {
  b->max_blocks_per_seq = 1;
  for (const DraftInput* in : rows) {
    b->max_blocks_per_seq = std::max<int64_t>(b->max_blocks_per_seq, static_cast<int64_t>(in->block_ids.size()));
  }
  b->block_tables.assign(static_cast<size_t>(b->num_seqs * b->max_blocks_per_seq), -1);
  for (size_t r = 0; r < rows.size(); ++r) {
    std::copy(rows[r]->block_ids.begin(), rows[r]->block_ids.end(),
              b->block_tables.begin() + static_cast<int64_t>(r) * b->max_blocks_per_seq);
  }
}

}  // namespace

StatusOr<std::unique_ptr<DraftModelProposer>> DraftModelProposer::Create(const std::string& draft_path,
                                                                         const std::string& target_path,
                                                                         const ModelConfig& target, Backend* backend,
                                                                         int64_t num_blocks, int64_t block_size) {
  auto p = std::unique_ptr<DraftModelProposer>(new DraftModelProposer());
  auto model = Model::Load(draft_path, backend);
  if (!model.ok()) {
    return InvalidArgument("--speculative-config: model '" + draft_path + "': " + model.status().message());
  }
  p->model_ = std::move(model).value();
  const ModelConfig& dc = p->model_->config();
  if (dc.vocab_size != target.vocab_size) {
    return InvalidArgument("--speculative-config: model '" + draft_path + "' has a vocabulary of " +
                           std::to_string(dc.vocab_size) + " tokens, the target " + std::to_string(target.vocab_size) +
                           "; a draft model must share the target's tokenizer and vocabulary");
  }
  const std::string dt = ReadTokenizer(draft_path), tt = ReadTokenizer(target_path);
  if (!dt.empty() && !tt.empty() && dt != tt) {
    return InvalidArgument("--speculative-config: model '" + draft_path +
                           "' has a different tokenizer.json from the target's; a draft model must share the "
                           "target's tokenizer and vocabulary");
  }
  ASSIGN_OR_RETURN(p->cache_, p->model_->CreateKvCache(num_blocks, block_size));
  return p;
}

Status DraftModelProposer::CopyBlocks(std::span<const CopyOp> copies) {
  if (copies.empty()) return Status::Ok();
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (const CopyOp& c : copies) pairs.emplace_back(c.src, c.dst);
  return cache_->CopyBlocks(pairs);
}

void DraftModelProposer::Draw(const DraftInput& in, std::span<const float> row, Draft* d) {
  const int64_t n_out = static_cast<int64_t>(in.token_ids.size()) - in.num_prompt_tokens;
  const int64_t pos = n_out + static_cast<int64_t>(d->token_ids.size());  // output position of this draft
  std::vector<int32_t> output(in.token_ids.begin() + in.num_prompt_tokens, in.token_ids.end());
  output.insert(output.end(), d->token_ids.begin(), d->token_ids.end());
  SampleContext ctx;
  ctx.prompt_tokens = in.token_ids.first(static_cast<size_t>(in.num_prompt_tokens));
  ctx.output_tokens = output;
  if (pos < in.min_tokens) ctx.banned_tokens = in.banned_tokens;
  ctx.choice_index = in.choice_index;
  ctx.output_position = pos;
  if (!in.want_probs) {
    // The most likely token under the draft's processed distribution: the best
    // point-mass proposal.
    SamplerConfig greedy = *in.sampler;
    greedy.temperature = 0.0f;
    greedy.logprobs = false;
    greedy.top_logprobs = 0;
    d->token_ids.push_back(sampler_.Sample(row, greedy, ctx).token);
    return;
  }
  const std::vector<double> q = sampler_.Distribution(row, *in.sampler, ctx);
  const double u = DraftUniform(in.sampler->seed, in.choice_index, pos);
  int32_t token = -1;
  double cum = 0.0;
  for (size_t i = 0; i < q.size(); ++i) {
    if (q[i] <= 0.0) continue;
    token = static_cast<int32_t>(i);
    cum += q[i];
    if (u < cum) break;
  }
  d->token_ids.push_back(token);
  d->probs.emplace_back(q.begin(), q.end());
}

Status DraftModelProposer::Propose(std::span<const DraftInput> inputs, std::vector<Draft>* drafts) {
  drafts->assign(inputs.size(), Draft{});
  Status s = ProposeImpl(inputs, drafts);
  if (!s.ok()) {
    // The draft KV of this step's positions is unknown: skip them (later
    // proposals for these sequences may be worse; outputs never change).
    for (const DraftInput& in : inputs) computed_[in.seq_id] = in.num_computed_tokens;
    drafts->assign(inputs.size(), Draft{});
  }
  return s;
}

Status DraftModelProposer::ProposeImpl(std::span<const DraftInput> inputs, std::vector<Draft>* drafts) {
  const int64_t bs = cache_->block_size();
  const int64_t vocab = model_->config().vocab_size;
  // Pass 0: catch up on what the target computed, plus the newest token of
  // each speculating sequence (its logits give the first draft).
  ForwardBatch b;
  std::vector<const DraftInput*> rows;
  std::vector<size_t> sampled;  // input index per logits row
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DraftInput& in = inputs[i];
    auto it = computed_.find(in.seq_id);
    // Valid draft KV: what the last pass left (if it kept up with the target),
    // never past the target's verified tokens.
    int64_t from = in.start_position;
    if (it != computed_.end() && it->second >= in.start_position) from = std::min(it->second, in.num_computed_tokens);
    const int64_t to = in.k > 0 ? static_cast<int64_t>(in.token_ids.size()) : in.num_computed_tokens;
    computed_[in.seq_id] = from;
    if (to <= from) continue;
    RETURN_IF_ERROR(AddRows(&b, in, in.token_ids.subspan(static_cast<size_t>(from), static_cast<size_t>(to - from)),
                            from, bs, in.k > 0));
    rows.push_back(&in);
    if (in.k > 0) sampled.push_back(i);
  }
  if (rows.empty()) return Status::Ok();
  FinishBatch(&b, rows);
  RETURN_IF_ERROR(model_->Forward(b, cache_.get(), &logits_));
  for (const DraftInput* in : rows) {
    computed_[in->seq_id] = in->k > 0 ? static_cast<int64_t>(in->token_ids.size()) : in->num_computed_tokens;
  }
  for (size_t r = 0; r < sampled.size(); ++r) {
    Draw(inputs[sampled[r]], std::span<const float>(logits_).subspan(r * vocab, vocab), &(*drafts)[sampled[r]]);
  }
  // Passes 1..k-1: the previous draft in, the next one out.
  for (int32_t j = 1;; ++j) {
    ForwardBatch step;
    std::vector<const DraftInput*> step_rows;
    std::vector<size_t> idx;
    for (size_t i : sampled) {
      const DraftInput& in = inputs[i];
      if (in.k <= j) continue;
      const Draft& d = (*drafts)[i];
      const int64_t pos = static_cast<int64_t>(in.token_ids.size()) - 1 + j;
      RETURN_IF_ERROR(
          AddRows(&step, in, std::span<const int32_t>(d.token_ids).subspan(static_cast<size_t>(j - 1), 1), pos, bs, true));
      step_rows.push_back(&in);
      idx.push_back(i);
    }
    if (step_rows.empty()) break;
    FinishBatch(&step, step_rows);
    RETURN_IF_ERROR(model_->Forward(step, cache_.get(), &logits_));
    for (size_t r = 0; r < idx.size(); ++r) {
      const DraftInput& in = inputs[idx[r]];
      computed_[in.seq_id] = static_cast<int64_t>(in.token_ids.size()) + j;
      Draw(in, std::span<const float>(logits_).subspan(r * vocab, vocab), &(*drafts)[idx[r]]);
    }
  }
  return Status::Ok();
}

}  // namespace tessera
