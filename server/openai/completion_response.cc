#include "server/openai/completion_response.h"

#include "server/openai/kv_transfer_params.h"

#include <utility>

namespace tessera::openai {
namespace {

using nlohmann::json;

// Appends the echo prompt's tokens (position 0 without a logprob).
void AddPromptTokens(const PromptEcho& echo, const std::vector<LogprobEntry>& prompt_logprobs,
                     CompletionLogprobs* lp) {
  if (echo.first_token) lp->Add(*echo.first_token, /*without_logprob=*/true);
  for (const LogprobEntry& e : prompt_logprobs) lp->Add(e);
}

}  // namespace

CompletionLogprobs::CompletionLogprobs(int32_t top_k, int64_t start_offset) : top_k_(top_k), offset_(start_offset) {}

void CompletionLogprobs::Add(const LogprobEntry& entry, bool without_logprob) {
  tokens_.push_back(entry.token);
  text_offset_.push_back(offset_);
  offset_ += CodePoints(entry.token);
  if (without_logprob) {
    token_logprobs_.push_back(nullptr);
    top_logprobs_.push_back(nullptr);
    return;
  }
  token_logprobs_.push_back(ClampLogprob(entry.logprob));
  // The sampled token plus up to top_k alternatives, keyed by text (first wins).
  json top = json::object();
  top[entry.token] = ClampLogprob(entry.logprob);
  for (size_t i = 0; i < entry.top.size() && static_cast<int64_t>(i) < top_k_; ++i) {
    if (!top.contains(entry.top[i].token)) top[entry.top[i].token] = ClampLogprob(entry.top[i].logprob);
  }
  top_logprobs_.push_back(std::move(top));
}

json CompletionLogprobs::ToJson() const {
  return {{"tokens", tokens_}, {"token_logprobs", token_logprobs_}, {"top_logprobs", top_logprobs_},
          {"text_offset", text_offset_}};
}

json PromptLogprobsJson(const std::vector<LogprobEntry>& positions) {
  json out = json::array();
  out.push_back(nullptr);
  for (const LogprobEntry& e : positions) {
    json pos = json::object();
    json self = {{"logprob", ClampLogprob(e.logprob)}, {"decoded_token", e.token}};
    for (size_t i = 0; i < e.top.size(); ++i) {
      if (e.top[i].token_id == e.token_id) self["rank"] = i + 1;
    }
    pos[std::to_string(e.token_id)] = std::move(self);
    for (size_t i = 0; i < e.top.size(); ++i) {
      const std::string key = std::to_string(e.top[i].token_id);
      if (pos.contains(key)) continue;
      pos[key] = {{"logprob", ClampLogprob(e.top[i].logprob)}, {"rank", i + 1}, {"decoded_token", e.top[i].token}};
    }
    out.push_back(std::move(pos));
  }
  return out;
}

CompletionAccumulator::CompletionAccumulator(int num_prompts, int n, CompletionOptions options)
    : n_(n), options_(std::move(options)), prompts_(static_cast<size_t>(num_prompts)),
      choices_(static_cast<size_t>(num_prompts) * static_cast<size_t>(n)) {}

void CompletionAccumulator::SetPromptEcho(int prompt_index, PromptEcho echo) {
  if (prompt_index < 0 || static_cast<size_t>(prompt_index) >= prompts_.size()) return;
  prompts_[prompt_index].echo = std::move(echo);
}

void CompletionAccumulator::Add(int prompt_index, const GenerationUpdate& update) {
  if (prompt_index < 0 || static_cast<size_t>(prompt_index) >= prompts_.size()) return;
  Prompt& p = prompts_[prompt_index];
  p.usage.Update(update);
  if (update.kv_export) kv_export_ = update.kv_export;
  p.prompt_logprobs.insert(p.prompt_logprobs.end(), update.prompt_logprobs.begin(), update.prompt_logprobs.end());
  for (const ChoiceDelta& d : update.choices) {
    if (d.index < 0 || d.index >= n_) continue;
    Choice& c = choices_[static_cast<size_t>(prompt_index) * n_ + d.index];
    c.text += d.text;
    c.token_ids.insert(c.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
    c.logprobs.insert(c.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
    if (d.finish_reason != FinishReason::kNone) {
      c.finish = d.finish_reason;
      c.stop_reason = StopReasonJson(d);
    }
  }
}

json CompletionAccumulator::Build(const std::string& id, int64_t created, const std::string& model) const {
  json choices = json::array();
  UsageCounter usage;
  for (const Prompt& p : prompts_) usage += p.usage;
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    const Prompt& p = prompts_[i / static_cast<size_t>(n_)];
    json logprobs = nullptr;
    if (options_.logprobs) {
      CompletionLogprobs lp(*options_.logprobs);
      if (options_.echo) AddPromptTokens(p.echo, p.prompt_logprobs, &lp);
      for (const LogprobEntry& e : c.logprobs) lp.Add(e);
      logprobs = lp.ToJson();
    }
    json choice = {{"index", i},
                   {"text", options_.echo ? p.echo.text + c.text : c.text},
                   {"logprobs", std::move(logprobs)},
                   {"finish_reason", FinishReasonJson(c.finish)},
                   {"stop_reason", c.stop_reason}};
    if (options_.prompt_logprobs) choice["prompt_logprobs"] = PromptLogprobsJson(p.prompt_logprobs);
    if (options_.return_token_ids) choice["token_ids"] = c.token_ids;
    choices.push_back(std::move(choice));
  }
  json out = {{"id", id},
              {"object", "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", std::move(choices)},
              {"usage", UsageJson(usage)}};
  if (kv_export_) out["kv_transfer_params"] = KvTransferParamsJson(*kv_export_);
  return out;
}

CompletionStream::CompletionStream(std::string id, int64_t created, std::string model, int num_prompts, int n,
                                   CompletionOptions options, bool continuous_usage)
    : id_(std::move(id)), created_(created), model_(std::move(model)), n_(n), options_(std::move(options)),
      continuous_usage_(continuous_usage), prompts_(static_cast<size_t>(num_prompts)),
      choices_(static_cast<size_t>(num_prompts) * static_cast<size_t>(n)) {}

void CompletionStream::SetPromptEcho(int prompt_index, PromptEcho echo) {
  if (prompt_index < 0 || static_cast<size_t>(prompt_index) >= prompts_.size()) return;
  prompts_[prompt_index].echo = std::move(echo);
}

json CompletionStream::Header() const {
  return {{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_}};
}

std::vector<json> CompletionStream::OnUpdate(int prompt_index, const GenerationUpdate& update) {
  std::vector<json> chunks;
  if (prompt_index < 0 || static_cast<size_t>(prompt_index) >= prompts_.size()) return chunks;
  Prompt& p = prompts_[prompt_index];
  p.usage.Update(update);
  p.prompt_logprobs.insert(p.prompt_logprobs.end(), update.prompt_logprobs.begin(), update.prompt_logprobs.end());
  for (const ChoiceDelta& d : update.choices) {
    if (d.index < 0 || d.index >= n_) continue;
    const size_t index = static_cast<size_t>(prompt_index) * n_ + d.index;
    Choice& c = choices_[index];
    std::string text;
    CompletionLogprobs lp(options_.logprobs.value_or(0), c.offset);
    if (!c.started && options_.echo) {
      text = p.echo.text;
      if (options_.logprobs) AddPromptTokens(p.echo, p.prompt_logprobs, &lp);
    }
    c.started = true;
    text += d.text;
    for (const LogprobEntry& e : d.logprobs) lp.Add(e);
    const bool finished = d.finish_reason != FinishReason::kNone;
    if (text.empty() && lp.empty() && !finished && !(options_.return_token_ids && !d.token_ids.empty())) continue;
    c.offset = lp.next_offset();
    json choice = {{"index", index},
                   {"text", std::move(text)},
                   {"logprobs", options_.logprobs ? lp.ToJson() : json(nullptr)},
                   {"finish_reason", FinishReasonJson(d.finish_reason)},
                   {"stop_reason", StopReasonJson(d)}};
    if (options_.return_token_ids) choice["token_ids"] = d.token_ids;
    json chunk = Header();
    chunk["choices"] = json::array({std::move(choice)});
    if (continuous_usage_) {
      chunk["usage"] = UsageJson(p.usage);
    }
    chunks.push_back(std::move(chunk));
  }
  return chunks;
}

json CompletionStream::UsageChunk() const {
  UsageCounter usage;
  for (const Prompt& p : prompts_) usage += p.usage;
  json chunk = Header();
  chunk["choices"] = json::array();
  chunk["usage"] = UsageJson(usage);
  return chunk;
}

}  // namespace tessera::openai
