// EngineLoop's speculative decoding: building the proposer, verifying drafts
// in the flattened batch, proposing the next step's drafts. The Scheduler
// only carries the drafts (SetDraftTokens, 1 + k tokens per sequence, roll
// back of rejected slots); everything that touches logits or a draft model
// happens here, on the loop thread.

#include "runtime/engine_loop.h"
#include "common/log.h"
#include "runtime/spec/draft_model_proposer.h"
#include "runtime/spec/ngram_proposer.h"
#include "runtime/spec/spec_policy.h"

namespace tessera {

Status EngineLoop::InitSpeculation(const EngineLoopOptions& options) {
  if (!options.speculative) return Status::Ok();
  spec_config_ = *options.speculative;
  const SpeculativeConfig& c = spec_config_;
  if (c.method == SpecMethod::kNgram) {
    proposer_ = std::make_unique<NgramProposer>(c.prompt_lookup_min, c.prompt_lookup_max);
    LogInfo("speculative decoding: ngram, k = {}, prompt lookup n = {}..{}", c.num_speculative_tokens,
            c.prompt_lookup_min, c.prompt_lookup_max);
  } else {
    const KvCacheManager& kv = scheduler_->kv_cache();
    ASSIGN_OR_RETURN(auto draft, DraftModelProposer::Create(c.model, options.model_dir, model_->config(),
                                                            backend_.get(), kv.num_blocks(), kv.block_size()));
    LogInfo("speculative decoding: draft model {} ({} layers, hidden {}), k = {}, draft KV cache {:.1f} MiB",
            c.model, draft->config().num_layers, draft->config().hidden_size, c.num_speculative_tokens,
            draft->kv_cache_bytes() / 1048576.0);
    proposer_ = std::move(draft);
  }
  if (options.wrap_proposer) proposer_ = options.wrap_proposer(std::move(proposer_));
  spec_counters_.num_accepted_tokens_per_pos.assign(static_cast<size_t>(c.num_speculative_tokens), 0);
  return Status::Ok();
}

VerifyResult EngineLoop::VerifySequenceDrafts(const ScheduledSequence& s, const Sequence& seq, const Active& a,
                                      const float* rows, int64_t vocab) {
  const int64_t k = s.num_draft_tokens;
  const std::span<const int32_t> all(seq.token_ids);
  VerifyInput in;
  in.logits = std::span<const float>(rows, static_cast<size_t>((1 + k) * vocab));
  in.vocab = vocab;
  in.drafts = std::span<const int32_t>(s.token_ids).last(static_cast<size_t>(k));
  auto q = draft_probs_.find(s.seq_id);
  if (q != draft_probs_.end() && static_cast<int64_t>(q->second.size()) >= k) {
    in.draft_probs = std::span<const std::vector<float>>(q->second).first(static_cast<size_t>(k));
  }
  in.config = &a.sampler;
  in.prompt_tokens = all.first(static_cast<size_t>(seq.num_prompt_tokens));
  in.output_tokens = all.subspan(static_cast<size_t>(seq.num_prompt_tokens));
  in.min_tokens = a.min_tokens;
  in.banned_tokens = a.banned;
  in.choice_index = s.index;
  VerifyResult v = VerifyDrafts(sampler_, in);
  if (q != draft_probs_.end()) draft_probs_.erase(q);
  acceptance_[s.seq_id].Record(v.num_accepted, static_cast<int32_t>(k));
  ++spec_counters_.num_drafts;
  spec_counters_.num_draft_tokens += k;
  spec_counters_.num_accepted_tokens += v.num_accepted;
  for (int32_t i = 0; i < v.num_accepted && i < static_cast<int32_t>(spec_counters_.num_accepted_tokens_per_pos.size());
       ++i) {
    ++spec_counters_.num_accepted_tokens_per_pos[i];
  }
  return v;
}

void EngineLoop::ProposeDrafts(const SchedulerOutput& plan) {
  // k for this batch size: sequences that will decode next step.
  const int32_t k_step = SpeculativeTokensForBatch(spec_config_, scheduler_->num_running());
  std::vector<DraftInput> inputs;
  inputs.reserve(plan.seqs.size());
  for (const ScheduledSequence& s : plan.seqs) {
    const Sequence* seq = scheduler_->GetSequence(s.seq_id);
    if (seq == nullptr || seq->status != SeqStatus::kRunning) continue;
    auto it = active_.find(s.request_id);
    if (it == active_.end()) continue;
    const Active& a = it->second;
    DraftInput in;
    in.seq_id = s.seq_id;
    in.token_ids = seq->token_ids;
    in.num_prompt_tokens = seq->num_prompt_tokens;
    in.start_position = s.start_position;
    in.num_computed_tokens = seq->num_computed_tokens;
    const bool decoding = seq->num_computed_tokens == seq->num_tokens() - 1;
    // Never propose past max_tokens: the last token is always the target's own.
    const int64_t room = seq->max_output_tokens - seq->num_output_tokens() - 1;
    int32_t k = decoding ? static_cast<int32_t>(std::min<int64_t>(k_step, std::max<int64_t>(0, room))) : 0;
    if (a.constraint) k = 0;  // structured output: drafts are not checked against the grammar, so none
    if (k > 0) k = acceptance_[s.seq_id].Tokens(k, spec_config_.min_draft_acceptance);
    if (k > 0) k = scheduler_->ReserveDraftSlots(s.seq_id, k);
    in.k = k;
    in.block_ids = scheduler_->kv_cache().blocks(s.seq_id);
    in.sampler = &a.sampler;
    in.choice_index = s.index;
    in.min_tokens = a.min_tokens;
    in.banned_tokens = a.banned;
    in.want_probs = !a.seeded && a.sampler.temperature >= 1e-5f;
    inputs.push_back(in);
  }
  if (inputs.empty()) return;
  std::vector<Draft> drafts;
  Status st = proposer_->Propose(inputs, &drafts);
  if (!st.ok()) {
    ++spec_counters_.num_proposer_failures;
    if (!spec_failure_logged_) {
      LogWarn("speculative decoding: the proposer failed ({}); these steps fall back to plain decode "
              "(logged once)", st.ToString());
      spec_failure_logged_ = true;
    }
    return;
  }
  for (size_t i = 0; i < inputs.size() && i < drafts.size(); ++i) {
    Draft& d = drafts[i];
    draft_probs_.erase(inputs[i].seq_id);
    if (d.token_ids.empty() || inputs[i].k == 0) continue;
    if (static_cast<int64_t>(d.token_ids.size()) > inputs[i].k) d.token_ids.resize(static_cast<size_t>(inputs[i].k));
    if (!scheduler_->SetDraftTokens(inputs[i].seq_id, std::move(d.token_ids)).ok()) continue;
    if (!d.probs.empty()) draft_probs_[inputs[i].seq_id] = std::move(d.probs);
  }
}

}  // namespace tessera
