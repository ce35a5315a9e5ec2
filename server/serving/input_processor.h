// The input processor (as vLLM's InputProcessor): where a request is
// validated, once, before it reaches the engine (docs/architecture.md,
// "Validation"). A front end parses its wire format (openai/ for HTTP,
// grpc/convert.h for gRPC), tokenizes, builds the engine's Request and hands
// it here; ProcessInput checks it with ValidateRequest (scheduler/request.h)
// against the model's limits. ServingEngine::Submit, the engine loop and the
// scheduler then only check their own invariants and capacity.
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "scheduler/request.h"
#include "scheduler/sampling_params.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace tessera {

// A validated request and how its tokens become text (front-end-only).
struct GenerateInput {
  // request.id: unique among live requests; may stay empty through
  // ProcessInput, the front end names it before ServingEngine::Submit.
  Request request;
  bool skip_special_tokens = true;  // in the returned text
  bool include_stop_str_in_output = false;
  // The matched API key's id (ApiKeyTenantId; "" without keys): the request's
  // cache namespace under --cache-isolation api-key (ServingEngine::Submit).
  std::string tenant;
};

// `request` with its text options, once ValidateRequest accepts it against
// `limits`: INVALID_ARGUMENT naming the field, OUT_OF_RANGE for the context
// length (IsContextLengthExceeded).
StatusOr<GenerateInput> ProcessInput(Request request, bool skip_special_tokens, bool include_stop_str_in_output,
                                     const ModelLimits& limits);

// A conversation for the model's chat template, as the request path has it.
struct ChatPromptInput {
  const text::ChatTemplate* chat_template = nullptr;  // null: FAILED_PRECONDITION naming model_name
  std::string model_name;
  nlohmann::ordered_json messages;  // in the template's convention (tool calls converted)
  nlohmann::ordered_json tools;     // array or null
  bool add_generation_prompt = true;
  // Cut what the template appends after the final message's content (its
  // end-of-turn markup), so the model continues that message.
  bool continue_final_message = false;
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();
  bool add_special_tokens = false;  // BOS/EOS of the tokenizer's post-processor, on top of the template's
  // --chat-template-content-special-tokens: special-token text in the
  // client's strings becomes control tokens (HF's default). Off: it is plain
  // text (text/special_text.h), as OpenAI does.
  bool content_special_tokens = false;
  int64_t now_unix_seconds = -1;  // strftime_now's clock (render-chat --now); < 0: the system's
};

struct ChatPrompt {
  std::string text;             // the rendered prompt (what the ids spell)
  std::vector<int32_t> ids;
};

// Renders `in` with its template and tokenizes it (docs/architecture.md,
// "Validation"): the template's markup gives control tokens; special-token
// text in the client's strings (content, tool results, tool-call names and
// arguments, tool definitions, template kwargs) gives plain-text tokens unless
// content_special_tokens. Errors: RenderChatPrompt's (FAILED_PRECONDITION
// without a template, INVALID_ARGUMENT naming 'messages'). Thread-safe.
StatusOr<ChatPrompt> RenderChatPromptTokens(const text::Tokenizer& tokenizer, const ChatPromptInput& in);

}  // namespace tessera
