#include "server/openai/chat_response.h"

#include <utility>

namespace tessera::openai {

using nlohmann::json;

json ChatLogprobJson(const LogprobEntry& entry, int32_t top_k) {
  json top = json::array();
  for (size_t i = 0; i < entry.top.size() && static_cast<int64_t>(i) < top_k; ++i) {
    const LogprobEntry& t = entry.top[i];
    top.push_back({{"token", t.token}, {"logprob", ClampLogprob(t.logprob)}, {"bytes", t.bytes}});
  }
  return {{"token", entry.token},
          {"logprob", ClampLogprob(entry.logprob)},
          {"bytes", entry.bytes},
          {"top_logprobs", std::move(top)}};
}

ChatAccumulator::ChatAccumulator(int n, ChatOptions options)
    : options_(std::move(options)), choices_(static_cast<size_t>(n)) {}

void ChatAccumulator::Add(const GenerationUpdate& update) {
  usage_.Update(update);
  for (const ChoiceDelta& d : update.choices) {
    if (d.index < 0 || static_cast<size_t>(d.index) >= choices_.size()) continue;
    Choice& c = choices_[d.index];
    c.text += d.text;
    if (options_.logprobs) {
      for (const LogprobEntry& e : d.logprobs) c.logprobs.push_back(ChatLogprobJson(e, options_.top_logprobs));
    }
    if (d.finish_reason != FinishReason::kNone) {
      c.finish = d.finish_reason;
      c.stop_reason = StopReasonJson(d);
    }
  }
}

json ChatAccumulator::Build(const std::string& id, int64_t created, const std::string& model) const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    choices.push_back({{"index", i},
                       {"message", {{"role", "assistant"}, {"content", options_.echo_prefix + c.text}}},
                       {"logprobs", options_.logprobs ? json{{"content", c.logprobs}} : json(nullptr)},
                       {"finish_reason", FinishReasonJson(c.finish)},
                       {"stop_reason", c.stop_reason}});
  }
  return {{"id", id},
          {"object", "chat.completion"},
          {"created", created},
          {"model", model},
          {"choices", std::move(choices)},
          {"usage", UsageJson(usage_.prompt_tokens, usage_.completion_tokens, usage_.cached_tokens)}};
}

ChatStream::ChatStream(std::string id, int64_t created, std::string model, int n, ChatOptions options,
                       bool continuous_usage)
    : id_(std::move(id)), created_(created), model_(std::move(model)), options_(std::move(options)),
      continuous_usage_(continuous_usage), started_(static_cast<size_t>(n), false) {}

json ChatStream::Chunk(int index, json delta, json logprobs, json finish, json stop) const {
  json chunk = {{"id", id_},
                {"object", "chat.completion.chunk"},
                {"created", created_},
                {"model", model_},
                {"choices", json::array({{{"index", index},
                                          {"delta", std::move(delta)},
                                          {"logprobs", std::move(logprobs)},
                                          {"finish_reason", std::move(finish)},
                                          {"stop_reason", std::move(stop)}}})}};
  if (continuous_usage_) {
    chunk["usage"] = UsageJson(usage_.prompt_tokens, usage_.completion_tokens, usage_.cached_tokens);
  }
  return chunk;
}

void ChatStream::StartChoice(int index, std::vector<json>* out) {
  if (started_[index]) return;
  started_[index] = true;
  out->push_back(Chunk(index, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr, nullptr));
  if (!options_.echo_prefix.empty()) {
    out->push_back(Chunk(index, {{"content", options_.echo_prefix}}, nullptr, nullptr, nullptr));
  }
}

std::vector<json> ChatStream::Start() {
  std::vector<json> out;
  for (size_t i = 0; i < started_.size(); ++i) StartChoice(static_cast<int>(i), &out);
  return out;
}

std::vector<json> ChatStream::OnUpdate(const GenerationUpdate& update) {
  usage_.Update(update);
  std::vector<json> out;
  for (const ChoiceDelta& d : update.choices) {
    if (d.index < 0 || static_cast<size_t>(d.index) >= started_.size()) continue;
    StartChoice(d.index, &out);
    const bool finished = d.finish_reason != FinishReason::kNone;
    const bool has_logprobs = options_.logprobs && !d.logprobs.empty();
    if (d.text.empty() && !has_logprobs && !finished) continue;
    json delta = json::object();
    if (!d.text.empty()) delta["content"] = d.text;
    json logprobs = nullptr;
    if (options_.logprobs) {
      json content = json::array();
      for (const LogprobEntry& e : d.logprobs) content.push_back(ChatLogprobJson(e, options_.top_logprobs));
      logprobs = {{"content", std::move(content)}};
    }
    out.push_back(Chunk(d.index, std::move(delta), std::move(logprobs), FinishReasonJson(d.finish_reason),
                        StopReasonJson(d)));
  }
  return out;
}

json ChatStream::UsageChunk() const {
  return {{"id", id_},
          {"object", "chat.completion.chunk"},
          {"created", created_},
          {"model", model_},
          {"choices", json::array()},
          {"usage", UsageJson(usage_.prompt_tokens, usage_.completion_tokens, usage_.cached_tokens)}};
}

}  // namespace tessera::openai
