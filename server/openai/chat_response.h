// /v1/chat/completions response bodies from ServingEngine updates: an
// accumulator for the non-streamed chat.completion object and a chunk
// builder for streaming. One instance per request, used by one thread at a
// time. The caller handles update.status (send an error instead).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai/response_common.h"
#include "server/openai/tool_calls/chat_output.h"
#include "server/serving/serving_engine.h"

namespace tessera::openai {

struct ChatOptions {
  bool logprobs = false;
  int32_t top_logprobs = 0;
  std::string echo_prefix;  // prepended to each choice's content (ChatEchoPrefix)
  // Reasoning / tool-call parsing of each choice's text (echo prefix included:
  // it is part of the assistant message). Inactive: the text is the content.
  tools::ChatOutputOptions output;
  std::function<std::string()> make_tool_call_id = tools::RandomToolCallId;
  // vLLM's return_token_ids: each choice (and each update's last chunk of a
  // choice, an empty delta if the text is held back) carries "token_ids".
  bool return_token_ids = false;
};

// One entry of "logprobs":{"content":[...]}: {"token","logprob","bytes",
// "top_logprobs":[{"token","logprob","bytes"}, ...up to top_k]}.
nlohmann::json ChatLogprobJson(const LogprobEntry& entry, int32_t top_k);

class ChatAccumulator {
 public:
  ChatAccumulator(int n, ChatOptions options);
  void Add(const GenerationUpdate& update);
  // {"id","object":"chat.completion","created","model","choices":[{"index",
  // "message":{"role":"assistant","content"},"logprobs","finish_reason",
  // "stop_reason"}],"usage"}. With output parsing the message also has
  // "reasoning_content" (reasoning parser on) and "tool_calls" [{"id","type":
  // "function","function":{"name","arguments"}}] (when the model called
  // tools; then finish_reason "tool_calls" instead of "stop"); content is
  // null when only reasoning or calls were produced.
  nlohmann::json Build(const std::string& id, int64_t created, const std::string& model) const;

 private:
  struct Choice {
    std::string text;
    nlohmann::json logprobs = nlohmann::json::array();
    FinishReason finish = FinishReason::kNone;
    nlohmann::json stop_reason;
    std::vector<int32_t> token_ids;
  };
  ChatOptions options_;
  std::vector<Choice> choices_;
  UsageCounter usage_;
  std::optional<KvExportInfo> kv_export_;  // -> "kv_transfer_params" (prefill role)
};

class ChatStream {
 public:
  ChatStream(std::string id, int64_t created, std::string model, int n, ChatOptions options, bool continuous_usage);
  // First chunks of every choice not yet started: delta {"role":"assistant",
  // "content":""}, then the echo prefix as content when there is one. Call
  // once right after submitting (vLLM does); OnUpdate calls it lazily too.
  std::vector<nlohmann::json> Start();
  // One chunk per choice with something new: delta {"content"} ({} when
  // only finishing), "logprobs" ({"content":[...]} or null), "finish_reason"
  // and "stop_reason" (null until the choice's last chunk). With output
  // parsing a choice's new text may give several chunks, in output order:
  // {"reasoning_content"}, {"content"}, and per tool call OpenAI's pair
  // {"tool_calls":[{"index","id","type":"function","function":{"name",
  // "arguments":""}}]} then {"tool_calls":[{"index","function":{"arguments"}}]};
  // logprobs ride on the first, finish_reason on the last.
  std::vector<nlohmann::json> OnUpdate(const GenerationUpdate& update);
  // {"id",...,"choices":[],"usage":{...}}.
  nlohmann::json UsageChunk() const;

 private:
  nlohmann::json Chunk(int index, nlohmann::json delta, nlohmann::json logprobs, nlohmann::json finish,
                       nlohmann::json stop) const;
  void StartChoice(int index, std::vector<nlohmann::json>* out);
  // The deltas of `text`, new output of choice `index` (parsed when parsing is on).
  std::vector<nlohmann::json> Deltas(int index, const std::string& text, bool finished);

  std::string id_;
  int64_t created_;
  std::string model_;
  ChatOptions options_;
  bool continuous_usage_;
  std::vector<bool> started_;
  std::vector<std::optional<tools::ChatOutputParser>> parsers_;  // per choice; empty when inactive
  UsageCounter usage_;
};

// OpenAI's final finish_reason: "tool_calls" when a choice that stopped
// normally made tool calls.
nlohmann::json ChatFinishReasonJson(FinishReason reason, int num_tool_calls);

}  // namespace tessera::openai
