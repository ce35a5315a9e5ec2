#include "server/openai/chat_response.h"

#include <utility>

#include "server/openai/kv_transfer_params.h"

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

json ChatFinishReasonJson(FinishReason reason, int num_tool_calls) {
  if (reason == FinishReason::kStop && num_tool_calls > 0) return "tool_calls";
  return FinishReasonJson(reason);
}

namespace {

json ToolCallJson(const tools::IndexedToolCall& c) {
  return {{"id", c.id},
          {"type", "function"},
          {"function", {{"name", c.call.name}, {"arguments", c.call.arguments}}}};
}

}  // namespace

ChatAccumulator::ChatAccumulator(int n, ChatOptions options)
    : options_(std::move(options)), choices_(static_cast<size_t>(n)) {}

void ChatAccumulator::Add(const GenerationUpdate& update) {
  usage_.Update(update);
  if (update.kv_export) kv_export_ = update.kv_export;
  for (const ChoiceDelta& d : update.choices) {
    if (d.index < 0 || static_cast<size_t>(d.index) >= choices_.size()) continue;
    Choice& c = choices_[d.index];
    c.text += d.text;
    c.token_ids.insert(c.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
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
    json message = {{"role", "assistant"}};
    json finish = FinishReasonJson(c.finish);
    if (options_.output.active()) {
      tools::ChatOutputParser parser(options_.output, options_.make_tool_call_id);
      tools::ChatOutputDelta out = parser.Feed(options_.echo_prefix + c.text);
      out.Append(parser.Finish());
      const bool only_other = !out.tool_calls.empty() || !out.reasoning.empty();
      message["content"] = out.content.empty() && only_other ? json(nullptr) : json(out.content);
      if (parser.parses_reasoning()) {
        message["reasoning_content"] = out.reasoning.empty() ? json(nullptr) : json(out.reasoning);
      }
      if (!out.tool_calls.empty()) {
        json calls = json::array();
        for (const tools::IndexedToolCall& call : out.tool_calls) calls.push_back(ToolCallJson(call));
        message["tool_calls"] = std::move(calls);
      }
      finish = ChatFinishReasonJson(c.finish, parser.num_tool_calls());
    } else {
      message["content"] = options_.echo_prefix + c.text;
    }
    json choice = {{"index", i},
                   {"message", std::move(message)},
                   {"logprobs", options_.logprobs ? json{{"content", c.logprobs}} : json(nullptr)},
                   {"finish_reason", std::move(finish)},
                   {"stop_reason", c.stop_reason}};
    if (options_.return_token_ids) choice["token_ids"] = c.token_ids;
    choices.push_back(std::move(choice));
  }
  json out = {{"id", id},
              {"object", "chat.completion"},
              {"created", created},
              {"model", model},
              {"choices", std::move(choices)},
              {"usage", UsageJson(usage_)}};
  if (kv_export_) out["kv_transfer_params"] = KvTransferParamsJson(*kv_export_);
  return out;
}

ChatStream::ChatStream(std::string id, int64_t created, std::string model, int n, ChatOptions options,
                       bool continuous_usage)
    : id_(std::move(id)), created_(created), model_(std::move(model)), options_(std::move(options)),
      continuous_usage_(continuous_usage), started_(static_cast<size_t>(n), false) {
  if (options_.output.active()) {
    parsers_.resize(static_cast<size_t>(n));
    for (auto& p : parsers_) p.emplace(options_.output, options_.make_tool_call_id);
  }
}

std::vector<json> ChatStream::Deltas(int index, const std::string& text, bool finished) {
  std::vector<json> deltas;
  if (parsers_.empty()) {
    if (!text.empty()) deltas.push_back({{"content", text}});
    return deltas;
  }
  tools::ChatOutputParser& parser = *parsers_[static_cast<size_t>(index)];
  tools::ChatOutputDelta out = parser.Feed(text);
  if (finished) out.Append(parser.Finish());
  if (!out.reasoning.empty()) deltas.push_back({{"reasoning_content", out.reasoning}});
  if (!out.content.empty()) deltas.push_back({{"content", out.content}});
  for (const tools::IndexedToolCall& c : out.tool_calls) {
    deltas.push_back({{"tool_calls", json::array({{{"index", c.index},
                                                   {"id", c.id},
                                                   {"type", "function"},
                                                   {"function", {{"name", c.call.name}, {"arguments", ""}}}}})}});
    deltas.push_back(
        {{"tool_calls", json::array({{{"index", c.index}, {"function", {{"arguments", c.call.arguments}}}}})}});
  }
  return deltas;
}

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
    chunk["usage"] = UsageJson(usage_);
  }
  return chunk;
}

void ChatStream::StartChoice(int index, std::vector<json>* out) {
  if (started_[index]) return;
  started_[index] = true;
  out->push_back(Chunk(index, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr, nullptr));
  if (!options_.echo_prefix.empty()) {
    for (json& delta : Deltas(index, options_.echo_prefix, /*finished=*/false)) {
      out->push_back(Chunk(index, std::move(delta), nullptr, nullptr, nullptr));
    }
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
    std::vector<json> deltas = Deltas(d.index, d.text, finished);
    const bool has_ids = options_.return_token_ids && !d.token_ids.empty();
    if (deltas.empty() && !has_logprobs && !finished && !has_ids) continue;
    if (deltas.empty()) deltas.push_back(json::object());
    for (size_t k = 0; k < deltas.size(); ++k) {
      json logprobs = nullptr;
      if (options_.logprobs) {
        json content = json::array();  // the update's logprobs go on its first chunk
        if (k == 0) {
          for (const LogprobEntry& e : d.logprobs) content.push_back(ChatLogprobJson(e, options_.top_logprobs));
        }
        logprobs = {{"content", std::move(content)}};
      }
      const bool last = k + 1 == deltas.size();
      const int calls = parsers_.empty() ? 0 : parsers_[static_cast<size_t>(d.index)]->num_tool_calls();
      out.push_back(Chunk(d.index, std::move(deltas[k]), std::move(logprobs),
                          last ? ChatFinishReasonJson(d.finish_reason, calls) : json(nullptr),
                          last ? StopReasonJson(d) : json(nullptr)));
      if (options_.return_token_ids) {
        out.back()["choices"][0]["token_ids"] = last ? d.token_ids : std::vector<int32_t>();
      }
    }
  }
  return out;
}

json ChatStream::UsageChunk() const {
  return {{"id", id_},
          {"object", "chat.completion.chunk"},
          {"created", created_},
          {"model", model_},
          {"choices", json::array()},
          {"usage", UsageJson(usage_)}};
}

}  // namespace tessera::openai
