#include "server/openai/chat_request.h"

#include <limits>

#include "server/openai/chat_messages.h"

namespace tessera::openai {
namespace {

constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();

// max_completion_tokens wins over the legacy max_tokens; both are type-checked.
std::optional<ApiError> ReadMaxTokens(const Json& body, SamplingParams* params) {
  std::optional<int64_t> preferred;
  std::optional<int64_t> legacy;
  if (auto e = ReadInt(body, "max_completion_tokens", "max_completion_tokens", 1, kI32Max, &preferred)) return e;
  if (auto e = ReadInt(body, "max_tokens", "max_tokens", 1, kI32Max, &legacy)) return e;
  if (preferred) {
    params->max_tokens = static_cast<int32_t>(*preferred);
  } else if (legacy) {
    params->max_tokens = static_cast<int32_t>(*legacy);
  }
  return std::nullopt;
}

// reasoning_effort (OpenAI's field; gpt-oss's template reads the variable of
// that name) reaches the template as a variable, as vLLM passes it, unless
// chat_template_kwargs already sets it.
std::optional<ApiError> ReadReasoningEffort(const Json& body, Json* template_kwargs) {
  auto it = body.find("reasoning_effort");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string() || (*it != "low" && *it != "medium" && *it != "high")) {
    return TypeError("reasoning_effort", "one of \"low\", \"medium\", \"high\"", *it);
  }
  if (!template_kwargs->contains("reasoning_effort")) (*template_kwargs)["reasoning_effort"] = *it;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseChatRequest(std::string_view body_text, const RequestLimits& limits, ChatRequest* out) {
  Json body;
  if (auto e = ParseBodyObject(body_text, &body)) return e;
  ChatRequest r;
  if (auto e = ParseModel(body, limits, &r.model)) return e;
  if (auto e = ParseMessages(body, &r.messages)) return e;
  if (auto e = ParseTools(body, &r.tools)) return e;
  if (auto e = ParseTemplateKwargs(body, &r.template_kwargs)) return e;
  if (auto e = ReadReasoningEffort(body, &r.template_kwargs)) return e;
  if (auto e = ParseGenerationPromptFlags(body, &r.add_generation_prompt, &r.continue_final_message)) return e;
  if (auto e = ReadBool(body, "add_special_tokens", "add_special_tokens", &r.add_special_tokens)) return e;
  if (auto e = ReadBool(body, "echo", "echo", &r.echo)) return e;
  if (auto e = tools::ParseToolChoice(body, r.tools, &r.tool_choice)) return e;
  if (auto e = RefuseUnenforced(body)) return e;
  if (auto e = ParseKvTransferParams(body, &r.kv_transfer)) return e;
  if (auto e = ReadBool(body, "return_token_ids", "return_token_ids", &r.return_token_ids)) return e;
  if (auto e = ReadBool(body, "return_receipt", "return_receipt", &r.return_receipt)) return e;
  if (auto e = ParseStructuredOutput(body, &r.structured)) return e;
  if (auto e = ReadBool(body, "parallel_tool_calls", "parallel_tool_calls", &r.parallel_tool_calls)) return e;

  StreamFlags flags;
  if (auto e = ParseSamplingFields(body, limits, &r.params, &flags)) return e;
  if (auto e = ReadMaxTokens(body, &r.params)) return e;

  bool logprobs = false;
  if (auto e = ReadBool(body, "logprobs", "logprobs", &logprobs)) return e;
  std::optional<int64_t> top;
  if (auto e = ReadInt(body, "top_logprobs", "top_logprobs", 0, kMaxChatTopLogprobs, &top)) return e;
  if (auto e = SetChatLogprobs(logprobs, top, &r)) return e;

  if (auto e = CheckMinTokens(r.params)) return e;
  SetStreamFlags(flags, &r);
  *out = std::move(r);
  return std::nullopt;
}

std::optional<ApiError> SetChatLogprobs(bool logprobs, std::optional<int64_t> top_logprobs, ChatRequest* r) {
  if (top_logprobs && !logprobs) {
    return BadRequest("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
  }
  r->logprobs = logprobs;
  r->top_logprobs = top_logprobs ? static_cast<int32_t>(*top_logprobs) : 0;
  r->params.logprobs = r->logprobs;
  r->params.top_logprobs = r->top_logprobs;
  return std::nullopt;
}

std::string ChatEchoPrefix(const ChatRequest& request) {
  if (!request.echo || !request.continue_final_message || !request.messages.is_array() ||
      request.messages.empty()) {
    return "";
  }
  const Json& last = request.messages.back();
  if (!last.is_object() || last.value("role", Json()) != "assistant") return "";
  auto it = last.find("content");
  return it != last.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace tessera::openai
