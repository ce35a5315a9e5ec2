#include "server/openai/completion_request.h"

#include <algorithm>
#include <limits>

namespace tessera::openai {
namespace {

constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();

std::optional<ApiError> ReadTokenIds(const Json& ids, int64_t vocab, PromptInput* out) {
  if (ids.empty()) return BadRequest("'prompt' must not contain an empty list of token ids", "prompt");
  out->token_ids.reserve(ids.size());
  for (const Json& t : ids) {
    if (!IsTokenId(t, vocab)) {
      return PromptTokenIdError(vocab, t);
    }
    out->token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return std::nullopt;
}

std::optional<ApiError> ReadPrompts(const Json& body, const RequestLimits& limits, std::vector<PromptInput>* out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return BadRequest("'prompt' is required", "prompt");
  const Json& p = *it;
  const int64_t vocab = limits.model.vocab_size;
  out->clear();
  if (p.is_string()) {
    if (p.get_ref<const std::string&>().empty()) return EmptyPromptError();
    out->push_back({p.get<std::string>(), {}});
    return std::nullopt;
  }
  if (!p.is_array() || p.empty()) return PromptTypeError(p);
  const Json& first = p.front();
  if (first.is_number()) {  // one prompt of token ids
    PromptInput in;
    if (auto e = ReadTokenIds(p, vocab, &in)) return e;
    out->push_back(std::move(in));
    return std::nullopt;
  }
  if (p.size() > kMaxPrompts) {
    return BadRequest("'prompt' may hold at most " + std::to_string(kMaxPrompts) + " prompts", "prompt");
  }
  for (const Json& item : p) {
    PromptInput in;
    if (first.is_string() && item.is_string()) {
      if (item.get_ref<const std::string&>().empty()) return EmptyPromptError();
      in.text = item.get<std::string>();
    } else if (first.is_array() && item.is_array()) {
      if (auto e = ReadTokenIds(item, vocab, &in)) return e;
    } else {
      return PromptTypeError(p);
    }
    out->push_back(std::move(in));
  }
  return std::nullopt;
}

}  // namespace

ApiError PromptTypeError(const Json& shown) {
  return TypeError("prompt",
                   "a non-empty string, array of strings, array of token ids or array of arrays of token ids", shown);
}

ApiError EmptyPromptError() { return BadRequest("'prompt' must not be empty", "prompt"); }

ApiError PromptTokenIdError(int64_t vocab_size, const Json& shown) {
  return TypeError("prompt", "made of token ids inside the vocabulary (" + std::to_string(vocab_size) + ")", shown);
}

std::optional<ApiError> ParseCompletionRequest(std::string_view body_text, const RequestLimits& limits,
                                               CompletionRequest* out) {
  Json body;
  if (auto e = ParseBodyObject(body_text, &body)) return e;
  CompletionRequest r;
  if (auto e = ParseModel(body, limits, &r.model)) return e;
  if (auto e = ReadPrompts(body, limits, &r.prompts)) return e;
  if (auto e = RefuseUnenforced(body)) return e;
  if (auto e = ParseStructuredOutput(body, &r.structured)) return e;
  if (auto s = body.find("suffix"); s != body.end() && !s->is_null()) {
    if (!s->is_string()) return TypeError("suffix", "a string", *s);
    if (!s->get_ref<const std::string&>().empty()) return BadRequest("suffix is not supported", "suffix");
  }
  if (auto e = ReadBool(body, "echo", "echo", &r.echo)) return e;
  if (auto e = ReadBool(body, "add_special_tokens", "add_special_tokens", &r.add_special_tokens)) return e;
  if (auto e = ReadBool(body, "return_token_ids", "return_token_ids", &r.return_token_ids)) return e;
  if (auto e = ReadBool(body, "return_receipt", "return_receipt", &r.return_receipt)) return e;
  if (auto e = ParseKvTransferParams(body, &r.kv_transfer)) return e;
  if (r.kv_transfer.do_remote_decode || r.kv_transfer.remote) {
    if (r.prompts.size() != 1) return BadRequest("'kv_transfer_params' needs exactly one prompt", "prompt");
  }

  StreamFlags flags;
  if (auto e = ParseSamplingFields(body, limits, &r.params, &flags)) return e;

  r.params.max_tokens = kDefaultCompletionMaxTokens;
  if (auto m = body.find("max_tokens"); m != body.end() && m->is_null()) r.params.max_tokens.reset();
  std::optional<int64_t> v;
  if (auto e = ReadInt(body, "max_tokens", "max_tokens", 1, kI32Max, &v)) return e;
  if (v) r.params.max_tokens = static_cast<int32_t>(*v);
  v.reset();
  if (auto e = ReadInt(body, "logprobs", "logprobs", 0, limits.model.max_logprobs, &v)) return e;
  if (v) {
    r.logprobs = static_cast<int32_t>(*v);
    r.params.logprobs = true;
    r.params.top_logprobs = *r.logprobs;
  }
  v.reset();
  if (auto e = ReadInt(body, "prompt_logprobs", "prompt_logprobs", 0, limits.model.max_logprobs, &v)) return e;
  if (v) r.prompt_logprobs = static_cast<int32_t>(*v);
  r.params.prompt_logprobs = r.prompt_logprobs;
  if (r.echo && r.logprobs) {
    r.params.prompt_logprobs = std::max(r.params.prompt_logprobs.value_or(0), *r.logprobs);
  }

  if (auto e = CheckMinTokens(r.params)) return e;
  SetStreamFlags(flags, &r);
  *out = std::move(r);
  return std::nullopt;
}

}  // namespace tessera::openai
