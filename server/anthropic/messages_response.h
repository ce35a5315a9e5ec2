// /v1/messages response bodies from ServingEngine updates: the non-streamed
// Message object and the streamed events. The generated text goes through
// the same reasoning / tool-call parsing as a chat completion
// (openai/tool_calls/chat_output.h): reasoning becomes `thinking` blocks,
// content `text` blocks, calls `tool_use` blocks, so the two APIs agree on
// what a model said. One instance per request (one choice), used by one
// thread at a time; the caller handles update.status (an error instead).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "server/openai/response_common.h"
#include "server/openai/tool_calls/chat_output.h"
#include "server/serving/serving_engine.h"

namespace tessera::anthropic {

// "toolu_" + 24 random alphanumerics.
std::string RandomToolUseId();

struct MessageOptions {
  std::string id;     // "msg_..."
  std::string model;  // the served model name
  openai::tools::ChatOutputOptions output;  // inactive: the text is one text block
  std::function<std::string()> make_tool_use_id = RandomToolUseId;
};

// Anthropic's usage: input_tokens are the prompt tokens computed for this
// request, cache_read_input_tokens those served from the prefix cache (their
// sum is the prompt), cache_creation_input_tokens 0 (nothing is written
// under a retention promise; see server/anthropic/README.md).
nlohmann::json UsageJson(const openai::UsageCounter& usage);

// end_turn, max_tokens, stop_sequence (a stop string matched), tool_use (a
// normal stop after calls), pause_turn (the server aborted the request, e.g.
// at its drain deadline), null while unfinished.
nlohmann::json StopReasonJson(FinishReason reason, bool stop_string, int num_tool_calls);

class MessageAccumulator {
 public:
  explicit MessageAccumulator(MessageOptions options);
  void Add(const GenerationUpdate& update);
  // {"id","type":"message","role":"assistant","model","content":[blocks],
  // "stop_reason","stop_sequence","usage"}; blocks in output order:
  // {"type":"thinking","thinking","signature":""}, {"type":"text","text"},
  // {"type":"tool_use","id","name","input"}; one empty text block when the
  // model produced nothing.
  nlohmann::json Build() const;

 private:
  MessageOptions options_;
  std::string text_;
  FinishReason finish_ = FinishReason::kNone;
  std::optional<std::string> stop_string_;
  openai::UsageCounter usage_;
};

class MessageStream {
 public:
  explicit MessageStream(MessageOptions options);
  // The SSE events of an update: message_start and a ping before the first
  // content (usage as the first update reports it), then per block
  // content_block_start, its deltas (text_delta, thinking_delta,
  // input_json_delta: the whole arguments in one fragment) and
  // content_block_stop; on the last update the open block's stop,
  // message_delta {stop_reason, stop_sequence, usage} and message_stop.
  std::string OnUpdate(const GenerationUpdate& update);
  // The stream's tail when the generation ended without a final delta
  // (nothing when message_stop was sent): the events that close the message,
  // stop_reason end_turn. Keeps every stream well-formed for a client.
  std::string Finish();

 private:
  enum class Block { kNone, kText, kThinking };
  void Begin(std::string* out);
  void Open(Block kind, std::string* out);
  void Close(std::string* out);
  void Emit(const openai::tools::ChatOutputDelta& delta, std::string* out);
  void End(FinishReason reason, const std::optional<std::string>& stop_string, std::string* out);

  MessageOptions options_;
  std::optional<openai::tools::ChatOutputParser> parser_;
  openai::UsageCounter usage_;
  bool started_ = false;
  Block open_ = Block::kNone;
  int index_ = -1;  // the last block opened
  bool stopped_ = false;  // message_stop sent
};

}  // namespace tessera::anthropic
