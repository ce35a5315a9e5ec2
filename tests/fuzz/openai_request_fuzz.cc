// libFuzzer target: arbitrary bytes as the body of every JSON generation route
// (/v1/completions, /v1/chat/completions, /tokenize, /detokenize, and
// Anthropic's /v1/messages and /v1/messages/count_tokens, and OpenAI's
// /v1/responses with its items replayed as a previous conversation). Each parser
// must accept or return an ApiError naming the problem; any crash, sanitizer
// report, stack overflow (deep nesting) or escaping exception is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/anthropic/errors.h"
#include "server/anthropic/messages_request.h"
#include "server/openai/chat_request.h"
#include "server/openai/completion_request.h"
#include "server/openai/request_common.h"
#include "server/openai/sse.h"
#include "server/openai/tokenize_request.h"
#include "server/responses/responses_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 256 * 1024) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  tessera::openai::RequestLimits limits;
  limits.served_model_name = "m";
  limits.model.vocab_size = 1000;
  limits.model.max_model_len = 4096;

  tessera::openai::CompletionRequest completion;
  if (auto err = tessera::openai::ParseCompletionRequest(body, limits, &completion)) {
    (void)tessera::openai::SseError(*err);
  }
  tessera::openai::ChatRequest chat;
  if (auto err = tessera::openai::ParseChatRequest(body, limits, &chat)) {
    (void)tessera::openai::SseError(*err);
  } else {
    (void)tessera::openai::DumpJson(chat.messages);
  }
  tessera::openai::TokenizeRequest tokenize;
  (void)tessera::openai::ParseTokenizeRequest(body, limits, &tokenize);
  tessera::openai::DetokenizeRequest detokenize;
  (void)tessera::openai::ParseDetokenizeRequest(body, limits, &detokenize);
  for (const bool count_tokens : {false, true}) {
    tessera::anthropic::MessagesRequest messages;
    const tessera::anthropic::MessagesParseOptions options{.accept_cache_control = size % 2 == 0,
                                                           .count_tokens = count_tokens};
    if (auto err = tessera::anthropic::ParseMessagesRequest(body, limits, options, &messages)) {
      (void)tessera::anthropic::SseError(*err);
    } else {
      (void)tessera::openai::DumpJson(messages.chat.messages);
    }
  }
  tessera::responses::ResponsesRequest responses;
  if (auto err = tessera::responses::ParseResponsesRequest(body, limits, &responses)) {
    (void)tessera::openai::SseError(*err);
  } else {
    const tessera::openai::Json prior = responses.input_items;
    if (!tessera::responses::BuildChatMessages(prior, &responses)) {
      (void)tessera::openai::DumpJson(responses.chat.messages);
    }
  }
  return 0;
}
