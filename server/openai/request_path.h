// The one request path of both front ends: a request, parsed and checked
// field by field (HTTP: ParseCompletionRequest / ParseChatRequest from the
// body; gRPC: server/grpc/convert.h from the proto, into the same structs) ->
// structured outputs compiled, chat-rendered, tokenized -> through the input
// processor (serving/input_processor.h: the engine's Request, validated once,
// context length included) -> GenerateInputs ready for ServingEngine::Submit.
// Whatever one front end refuses, the other refuses with the same message.
//
// Pure functions of their inputs and the read-only model view; thread-safe.
// Cost: linear in the body, plus the chat template's (bounded) render work and
// tokenization of the prompt text; run them off the I/O threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "server/openai/api_error.h"
#include "server/openai/chat_request.h"
#include "server/openai/completion_request.h"
#include "server/openai/request_common.h"
#include "server/openai/tokenize_request.h"
#include "server/openai/tool_calls/chat_output.h"
#include "server/serving/serving_engine.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace tessera::openai {

// What the request path reads from the loaded model: views whose owner (the
// ServingEngine, or a fuzz target) outlives every use.
struct RequestModel {
  const text::Tokenizer* tokenizer = nullptr;         // required
  const text::ChatTemplate* chat_template = nullptr;  // null: chat is refused (400 "unsupported")
  RequestLimits limits;                               // served model name + ModelLimits
  // How chat output is parsed (serve's --tool-call-parser / --reasoning-parser);
  // RequestModelOf leaves it off.
  tools::ChatOutputConfig output;
  structured::StructuredOutputs* structured = nullptr;  // null: structured outputs are refused (400)
  // --chat-template-content-special-tokens: special-token text in chat
  // messages becomes control tokens (HF's default) instead of plain text.
  bool chat_content_special_tokens = false;
};

RequestModel RequestModelOf(const ServingEngine& engine);

struct PreparedCompletion {
  CompletionRequest request;  // prompts[i].token_ids moved into inputs[i]
  // One per request.prompts[i], same order; request.id left empty.
  std::vector<GenerateInput> inputs;
};

struct PreparedChat {
  ChatRequest request;
  GenerateInput input;  // request.id left empty
  // This request's reasoning / tool-call parsing: tools parsed under
  // tool_choice "auto" with model.output's parser; reasoning split when the
  // server has a reasoning parser. The mistral format's [TOOL_CALLS] is a
  // special token, so its requests keep special tokens in the text (as vLLM).
  tools::ChatOutputOptions output;
};

// On failure returns the error to send: 400 naming the field (code
// "context_length_exceeded" for prompt + max_tokens over the context,
// "unsupported" for chat without a template; "tool_choice" for tools under
// "auto" when model.output has no tool-call parser;
// "tools[i].function.parameters" for a schema a forced call (tool_choice
// "required" / named, enforced by the grammar of tool_grammar.h) cannot
// follow; the structured-output field when combined with a forced call),
// 404 model_not_found.
std::optional<ApiError> PrepareCompletion(const RequestModel& model, std::string_view body, PreparedCompletion* out);
std::optional<ApiError> PrepareChat(const RequestModel& model, std::string_view body, PreparedChat* out);
// The same from a request already parsed (by either front end).
std::optional<ApiError> PrepareParsedCompletion(const RequestModel& model, CompletionRequest request,
                                                PreparedCompletion* out);
std::optional<ApiError> PrepareParsedChat(const RequestModel& model, ChatRequest request, PreparedChat* out);

// /tokenize: the prompt's token ids (chat rendered first), or the error.
std::optional<ApiError> PrepareTokenize(const RequestModel& model, std::string_view body, TokenizeRequest* request,
                                        std::vector<int32_t>* ids);
std::optional<ApiError> PrepareParsedTokenize(const RequestModel& model, const TokenizeRequest& request,
                                              std::vector<int32_t>* ids);

}  // namespace tessera::openai
