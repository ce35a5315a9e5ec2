#include "server/openai/tokenize_request.h"

#include "server/openai/chat_messages.h"

namespace tessera::openai {

std::optional<ApiError> ParseTokenizeRequest(std::string_view body_text, const RequestLimits& limits,
                                             TokenizeRequest* out) {
  Json body;
  if (auto e = ParseBodyObject(body_text, &body)) return e;
  TokenizeRequest r;
  if (auto e = ParseModel(body, limits, &r.model)) return e;
  const bool has_prompt = body.contains("prompt") && !body["prompt"].is_null();
  const bool has_messages = body.contains("messages") && !body["messages"].is_null();
  if (has_prompt == has_messages) {
    return BadRequest("Exactly one of 'prompt' and 'messages' is required", has_prompt ? "messages" : "prompt");
  }
  if (auto e = ReadBool(body, "return_token_strs", "return_token_strs", &r.return_token_strs)) return e;
  if (has_prompt) {
    if (auto e = ReadString(body, "prompt", "prompt", &r.prompt)) return e;
    r.add_special_tokens = true;
  } else {
    r.is_chat = true;
    r.add_special_tokens = false;
    if (auto e = ParseMessages(body, &r.messages)) return e;
    if (auto e = ParseTools(body, &r.tools)) return e;
    if (auto e = ParseTemplateKwargs(body, &r.template_kwargs)) return e;
    if (auto e = ParseGenerationPromptFlags(body, &r.add_generation_prompt, &r.continue_final_message)) return e;
  }
  if (auto e = ReadBool(body, "add_special_tokens", "add_special_tokens", &r.add_special_tokens)) return e;
  *out = std::move(r);
  return std::nullopt;
}

std::optional<ApiError> ParseDetokenizeRequest(std::string_view body_text, const RequestLimits& limits,
                                               DetokenizeRequest* out) {
  Json body;
  if (auto e = ParseBodyObject(body_text, &body)) return e;
  DetokenizeRequest r;
  if (auto e = ParseModel(body, limits, &r.model)) return e;
  auto it = body.find("tokens");
  if (it == body.end() || it->is_null()) return BadRequest("'tokens' is required", "tokens");
  if (!it->is_array()) return TypeError("tokens", "an array of token ids", *it);
  r.tokens.reserve(it->size());
  for (const Json& t : *it) {
    if (!IsTokenId(t, limits.model.vocab_size)) {
      return TypeError("tokens", "made of token ids inside the vocabulary", t);
    }
    r.tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  *out = std::move(r);
  return std::nullopt;
}

nlohmann::json TokenizeResponse(const std::vector<int32_t>& tokens, int64_t max_model_len,
                                const std::vector<std::string>* token_strs) {
  nlohmann::json j = {{"count", tokens.size()}, {"max_model_len", max_model_len}, {"tokens", tokens}};
  if (token_strs != nullptr) j["token_strs"] = *token_strs;
  return j;
}

nlohmann::json DetokenizeResponse(const std::string& text) { return {{"prompt", text}}; }

}  // namespace tessera::openai
