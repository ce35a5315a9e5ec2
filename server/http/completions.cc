#include "server/http/completions.h"

#include <algorithm>
#include <cstdint>

namespace tessera {
namespace {

using json = nlohmann::json;

const char kTextPromptMessage[] =
    "'prompt' is text, but text prompts need the tokenizer, which is not implemented yet; send token ids "
    "(a list of integers, or a list holding one list of integers)";

// Parses a flat list of token ids into `out`.
std::optional<ApiError> ParseIds(const json& list, int64_t vocab_size, std::vector<int32_t>* out) {
  for (const json& x : list) {
    if (x.is_string()) return BadRequest(kTextPromptMessage, "prompt");
    if (!x.is_number_integer()) {
      return BadRequest("'prompt' must be a list of token ids (integers), got an element of type " +
                            std::string(x.type_name()),
                        "prompt");
    }
    const bool negative = x.is_number_integer() && !x.is_number_unsigned() && x.get<int64_t>() < 0;
    if (negative || x.get<uint64_t>() >= static_cast<uint64_t>(vocab_size)) {
      return BadRequest("'prompt' has token id " + x.dump() + ", outside the vocabulary [0, " +
                            std::to_string(vocab_size) + ")",
                        "prompt");
    }
    out->push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return std::nullopt;
}

std::optional<ApiError> ParsePrompt(const json& body, int64_t vocab_size, std::vector<int32_t>* out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return BadRequest("'prompt' is required", "prompt");
  const json& p = *it;
  if (p.is_string()) return BadRequest(kTextPromptMessage, "prompt");
  if (!p.is_array()) {
    return BadRequest("'prompt' must be a list of token ids, got " + std::string(p.type_name()), "prompt");
  }
  if (p.empty()) return BadRequest("'prompt' is empty", "prompt");
  if (p[0].is_array()) {
    if (p.size() != 1) {
      return BadRequest("'prompt' holds " + std::to_string(p.size()) +
                            " prompts; batched prompts are not supported yet, send one per request",
                        "prompt");
    }
    if (p[0].empty()) return BadRequest("'prompt' is empty", "prompt");
    return ParseIds(p[0], vocab_size, out);
  }
  return ParseIds(p, vocab_size, out);
}

}  // namespace

std::optional<ApiError> ParseCompletionRequest(const std::string& text, const CompletionLimits& limits,
                                               CompletionRequest* out) {
  const json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return BadRequest("request body is not valid JSON", "", "invalid_json");
  if (!body.is_object()) return BadRequest("request body must be a JSON object", "", "invalid_json");

  if (auto m = body.find("model"); m != body.end() && !m->is_null()) {
    if (!m->is_string()) return BadRequest("'model' must be a string", "model");
    if (m->get<std::string>() != limits.served_model) {
      return ApiError{HttpStatus::not_found,
                      "The model '" + m->get<std::string>() + "' does not exist; this server serves '" +
                          limits.served_model + "'",
                      "invalid_request_error", "model", "model_not_found"};
    }
  }
  if (auto s = body.find("stream"); s != body.end() && !s->is_null()) {
    if (!s->is_boolean()) return BadRequest("'stream' must be a boolean", "stream");
    if (s->get<bool>()) return BadRequest("'stream': true is not supported yet", "stream");
  }
  if (auto n = body.find("n"); n != body.end() && !n->is_null()) {
    if (!n->is_number_integer() || n->get<int64_t>() != 1) return BadRequest("only 'n': 1 is supported yet", "n");
  }
  if (auto t = body.find("temperature"); t != body.end() && !t->is_null()) {
    if (!t->is_number()) return BadRequest("'temperature' must be a number", "temperature");
    if (t->get<double>() != 0.0) {
      return BadRequest("'temperature' " + t->dump() +
                            " is not supported yet: only 0 (greedy decoding) is; sampling comes later",
                        "temperature");
    }
  }
  // OpenAI/vLLM parameters this interim endpoint cannot honour yet: reject any
  // non-default value rather than silently ignore it and mislead the client.
  static const char* const kUnsupported[] = {"stop", "logprobs", "echo", "suffix", "best_of", "logit_bias",
                                             "presence_penalty", "frequency_penalty", "repetition_penalty",
                                             "top_k", "min_p", "seed", "min_tokens", "stop_token_ids"};
  for (const char* key : kUnsupported) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) continue;
    const bool is_default = (it->is_boolean() && !it->get<bool>()) ||
                            (it->is_number() && it->get<double>() == 0.0 && std::string(key) != "top_k") ||
                            (std::string(key) == "top_k" && it->is_number() && it->get<double>() == -1.0) ||
                            (it->is_array() && it->empty());
    if (!is_default) {
      return BadRequest(std::string("'") + key + "' is not supported yet by this server (greedy decoding only)",
                        key);
    }
  }
  if (auto tp = body.find("top_p"); tp != body.end() && !tp->is_null() && !(tp->is_number() && tp->get<double>() == 1.0)) {
    return BadRequest("'top_p' is not supported yet by this server (greedy decoding only)", "top_p");
  }
  bool max_tokens_given = false;
  out->max_tokens = kDefaultMaxTokens;
  if (auto mt = body.find("max_tokens"); mt != body.end() && !mt->is_null()) {
    const bool ok = mt->is_number_integer() && !(mt->is_number_unsigned() && mt->get<uint64_t>() > INT64_MAX) &&
                    mt->get<int64_t>() >= 1;
    if (!ok) return BadRequest("'max_tokens' must be an integer >= 1, got " + mt->dump(), "max_tokens");
    out->max_tokens = mt->get<int64_t>();
    max_tokens_given = true;
  }

  out->prompt.clear();
  if (auto err = ParsePrompt(body, limits.vocab_size, &out->prompt)) return err;
  const int64_t prompt_len = static_cast<int64_t>(out->prompt.size());
  if (prompt_len >= limits.max_model_len) {
    return BadRequest("This model's maximum context length is " + std::to_string(limits.max_model_len) +
                          " tokens, but the prompt has " + std::to_string(prompt_len) +
                          " tokens, leaving no room for the completion",
                      "prompt", "context_length_exceeded");
  }
  if (!max_tokens_given) {
    out->max_tokens = std::min(out->max_tokens, limits.max_model_len - prompt_len);
  } else if (out->max_tokens > limits.max_model_len - prompt_len) {
    return BadRequest("This model's maximum context length is " + std::to_string(limits.max_model_len) +
                          " tokens, but " + std::to_string(prompt_len + out->max_tokens) + " were requested (" +
                          std::to_string(prompt_len) + " in the prompt, " + std::to_string(out->max_tokens) +
                          " for the completion); reduce the prompt or max_tokens",
                      "max_tokens", "context_length_exceeded");
  }
  // One request runs at a time, so it fits iff the whole cache holds it. The
  // last generated token is never fed back, hence the -1.
  const int64_t bs = limits.block_size;
  const int64_t blocks = (prompt_len + out->max_tokens - 1 + bs - 1) / bs;
  if (blocks > limits.num_kv_blocks) {
    return BadRequest("the request needs " + std::to_string(blocks) + " KV cache blocks (" +
                          std::to_string(prompt_len) + " prompt tokens + " + std::to_string(out->max_tokens) +
                          " max_tokens) but the server's cache holds " + std::to_string(limits.num_kv_blocks) +
                          " blocks of " + std::to_string(bs) +
                          " tokens; reduce the prompt or max_tokens, or restart the server with a larger "
                          "--num-kv-blocks",
                      "max_tokens", "kv_cache_capacity_exceeded");
  }
  return std::nullopt;
}

json MakeCompletionResponse(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                            const std::vector<int32_t>& tokens, const std::string& finish_reason,
                            int64_t prompt_tokens) {
  const int64_t completion_tokens = static_cast<int64_t>(tokens.size());
  json choice = {{"index", 0},
                 {"text", text},
                 {"token_ids", tokens},
                 {"finish_reason", finish_reason},
                 {"logprobs", nullptr}};
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})},
          {"usage",
           {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}}}};
}

}  // namespace tessera
