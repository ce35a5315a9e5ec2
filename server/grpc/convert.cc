#include "server/grpc/convert.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "server/openai/chat_messages.h"

namespace tessera::grpc_api {

using openai::Json;

Status CheckTokenIds(const std::vector<int32_t>& ids, int64_t vocab_size, const char* field) {
  for (int32_t id : ids) {
    if (id < 0 || (vocab_size > 0 && id >= vocab_size)) {
      return InvalidArgument(std::string("'") + field + "' has token id " + std::to_string(id) +
                             ", outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    }
  }
  return Status::Ok();
}

namespace {

constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();

// The GenerateRequest field an HTTP param stands for, where the names differ.
std::string GrpcFieldOf(const std::string& param, const v1::GenerateRequest& request) {
  if (param == "prompt") return request.has_token_ids() ? "token_ids" : "text";
  if (param == "logprobs" && !request.has_chat()) return "top_logprobs";
  return "";
}

// Optional int fields the proto and HTTP share, checked as ReadInt checks them.
template <typename T>
std::optional<ApiError> TakeInt(bool has, int64_t v, const char* name, int64_t lo, int64_t hi, T* dst) {
  if (!has) return std::nullopt;
  if (auto e = openai::CheckInt(name, v, lo, hi)) return e;
  *dst = static_cast<T>(v);
  return std::nullopt;
}

// logit_bias as the HTTP path reads it: at most one entry past its limit,
// in the order of the keys' decimal text (a JSON object's order), so the same
// entry is the one refused.
std::optional<ApiError> ReadLogitBias(const v1::SamplingParams& p, int64_t vocab, SamplingParams* params) {
  std::vector<std::pair<std::string, std::pair<int32_t, float>>> entries;
  for (const auto& [token, value] : p.logit_bias()) {
    if (entries.size() > openai::kMaxLogitBias) break;
    entries.push_back({std::to_string(token), {token, value}});
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  if (entries.size() > openai::kMaxLogitBias) {
    Json shown = Json::object();
    for (const auto& [key, e] : entries) shown[key] = static_cast<double>(e.second);
    return openai::LogitBiasSizeError(shown);
  }
  for (const auto& [key, e] : entries) {
    const auto [token, value] = e;
    if (!openai::IsTokenId(token, vocab)) return openai::LogitBiasKeyError(key);
    if (!(value >= -100.0f && value <= 100.0f)) return openai::LogitBiasValueError(Json(static_cast<double>(value)));
    params->logit_bias[token] = value;
  }
  return std::nullopt;
}

// openai::ParseSamplingFields for the proto: the same fields, checks and order.
std::optional<ApiError> ReadSampling(const v1::GenerateRequest& request, const openai::RequestLimits& limits,
                                     SamplingParams* params, openai::StreamFlags* flags) {
  const v1::SamplingParams& p = request.params();
  for (const openai::NumberField& f : openai::kNumberFields) {
    if (std::optional<float> v = SamplingFloat(p, f.name)) {
      if (auto e = openai::CheckNumber(f.name, *v, f.lo, f.hi, f.lo_open)) return e;
      params->*f.dst = *v;
    }
  }
  if (auto e = TakeInt(p.has_top_k(), p.top_k(), "top_k", -1, kI32Max, &params->top_k)) return e;
  if (params->top_k == 0) params->top_k = -1;  // vLLM: 0 disables, like -1
  if (auto e = TakeInt(p.has_min_tokens(), p.min_tokens(), "min_tokens", 0, kI32Max, &params->min_tokens)) return e;
  if (auto e = TakeInt(p.has_n(), p.n(), "n", 1, limits.model.max_n, &params->n)) return e;
  if (p.has_seed()) params->seed = p.seed();
  if (p.has_ignore_eos()) params->ignore_eos = p.ignore_eos();
  if (!p.stop().empty()) {
    std::vector<std::string> stop(p.stop().begin(), p.stop().end());
    if (!openai::StopFits(stop)) return openai::StopError(Json(stop));
    if (auto e = openai::RefuseEmptyStop(stop)) return e;
    params->stop = std::move(stop);
  }
  if (!p.stop_token_ids().empty()) {
    std::vector<int32_t> ids(p.stop_token_ids().begin(), p.stop_token_ids().end());
    if (ids.size() > openai::kMaxStopTokenIds) return openai::StopTokenIdsError(Json(ids));
    for (int32_t id : ids) {
      if (!openai::IsTokenId(id, limits.model.vocab_size)) return openai::StopTokenIdsError(Json(id));
    }
    params->stop_token_ids = std::move(ids);
  }
  if (!p.logit_bias().empty()) {
    if (auto e = ReadLogitBias(p, limits.model.vocab_size, params)) return e;
  }
  if (request.has_cache_salt()) {
    if (auto e = openai::CheckCacheSalt(request.cache_salt())) return e;
    flags->cache_salt = request.cache_salt();
  }
  if (p.has_skip_special_tokens()) flags->skip_special_tokens = p.skip_special_tokens();
  if (p.has_include_stop_str_in_output()) flags->include_stop_str_in_output = p.include_stop_str_in_output();
  return std::nullopt;
}

// openai::ParseStructuredOutput for the proto: response_format, then guided_*.
std::optional<ApiError> ReadStructured(const v1::SamplingParams& p, openai::StructuredOutputSpec* out) {
  using Kind = openai::StructuredOutputSpec::Kind;
  if (p.has_response_format_type()) {
    const std::string& t = p.response_format_type();
    if (t == "json_object") {
      if (auto e = openai::AddStructuredOutput(Kind::kJsonObject, "response_format", Json(), out)) return e;
    } else if (t == "json_schema") {
      if (!p.has_json_schema()) return openai::TypeError("response_format.json_schema", "an object", Json());
      if (auto e = openai::AddStructuredOutput(Kind::kJsonSchema, "response_format.json_schema.schema",
                                               Json(p.json_schema()), out)) {
        return e;
      }
    } else if (t != "text") {
      return openai::UnsupportedResponseFormat(t);
    }
  }
  if (p.has_guided_json()) {
    if (auto e = openai::AddStructuredOutput(Kind::kJsonSchema, "guided_json", Json(p.guided_json()), out)) return e;
  }
  if (p.has_guided_regex()) {
    if (auto e = openai::AddStructuredOutput(Kind::kRegex, "guided_regex", Json(p.guided_regex()), out)) return e;
  }
  if (!p.guided_choice().empty()) {
    Json choices(std::vector<std::string>(p.guided_choice().begin(), p.guided_choice().end()));
    if (auto e = openai::AddStructuredOutput(Kind::kChoice, "guided_choice", choices, out)) return e;
  }
  if (p.has_guided_grammar()) {
    if (auto e = openai::AddStructuredOutput(Kind::kGrammar, "guided_grammar", Json(p.guided_grammar()), out)) {
      return e;
    }
  }
  return std::nullopt;
}

std::optional<ApiError> ReadKvTransfer(const v1::GenerateRequest& request, KvTransferRequest* out) {
  if (!request.has_kv_transfer_params()) return std::nullopt;
  Json kv;
  if (Status s = grpc_api::ParseKvTransferText(request.kv_transfer_params(), &kv); !s.ok()) {
    return BadRequest(s.message(), "kv_transfer_params");
  }
  return ParseKvTransferValue(kv, out);
}

// The conversation as ParseMessages normalizes it.
std::optional<ApiError> ReadMessages(const v1::ChatPrompt& chat, Json* messages) {
  Json list = Json::array();
  for (const v1::ChatMessage& m : chat.messages()) list.push_back({{"role", m.role()}, {"content", m.content()}});
  return openai::ParseMessageList(list, messages);
}

// What an absent field parses to, for the chat fields the proto does not carry.
const Json& NoFields() {
  static const Json* none = new Json(Json::object());
  return *none;
}

}  // namespace

std::optional<ApiError> ToCompletionRequest(const v1::GenerateRequest& request, const openai::RequestLimits& limits,
                                            openai::CompletionRequest* out) {
  openai::CompletionRequest r;
  r.model = limits.served_model_name;
  openai::PromptInput prompt;
  if (request.has_text()) {
    if (request.text().text().empty()) return openai::EmptyPromptError();
    prompt.text = request.text().text();
  } else {
    const auto& ids = request.token_ids().ids();
    if (ids.empty()) return openai::PromptTypeError(Json::array());
    for (int32_t id : ids) {
      if (!openai::IsTokenId(id, limits.model.vocab_size)) {
        return openai::PromptTokenIdError(limits.model.vocab_size, Json(id));
      }
    }
    prompt.token_ids.assign(ids.begin(), ids.end());
  }
  r.prompts.push_back(std::move(prompt));
  const v1::SamplingParams& p = request.params();
  if (auto e = ReadStructured(p, &r.structured)) return e;
  if (request.has_text() && request.text().has_add_special_tokens()) {
    r.add_special_tokens = request.text().add_special_tokens();
  }
  if (auto e = ReadKvTransfer(request, &r.kv_transfer)) return e;

  openai::StreamFlags flags;
  if (auto e = ReadSampling(request, limits, &r.params, &flags)) return e;
  r.params.max_tokens = openai::kDefaultCompletionMaxTokens;
  if (auto e = TakeInt(p.has_max_tokens(), p.max_tokens(), "max_tokens", 1, kI32Max, &r.params.max_tokens)) {
    return e;
  }
  if (WantsLogprobs(p)) {
    const int32_t k = p.has_top_logprobs() ? p.top_logprobs() : 0;
    if (auto e = openai::CheckInt("logprobs", k, 0, limits.model.max_logprobs)) return e;
    r.logprobs = k;
    r.params.logprobs = true;
    r.params.top_logprobs = k;
  }
  r.params.prompt_logprobs = r.prompt_logprobs;
  if (auto e = openai::CheckMinTokens(r.params)) return e;
  openai::SetStreamFlags(flags, &r);
  *out = std::move(r);
  return std::nullopt;
}

std::optional<ApiError> ToChatRequest(const v1::GenerateRequest& request, const openai::RequestLimits& limits,
                                      openai::ChatRequest* out) {
  openai::ChatRequest r;
  r.model = limits.served_model_name;
  if (auto e = ReadMessages(request.chat(), &r.messages)) return e;
  if (auto e = openai::ParseTools(NoFields(), &r.tools)) return e;
  if (auto e = openai::ParseTemplateKwargs(NoFields(), &r.template_kwargs)) return e;
  if (request.chat().has_add_generation_prompt()) r.add_generation_prompt = request.chat().add_generation_prompt();
  if (auto e = openai::tools::ParseToolChoice(NoFields(), r.tools, &r.tool_choice)) return e;
  if (auto e = ReadKvTransfer(request, &r.kv_transfer)) return e;
  const v1::SamplingParams& p = request.params();
  if (auto e = ReadStructured(p, &r.structured)) return e;

  openai::StreamFlags flags;
  if (auto e = ReadSampling(request, limits, &r.params, &flags)) return e;
  if (auto e = TakeInt(p.has_max_tokens(), p.max_tokens(), "max_tokens", 1, kI32Max, &r.params.max_tokens)) {
    return e;
  }
  std::optional<int64_t> top;
  if (p.has_top_logprobs()) {
    if (auto e = openai::CheckInt("top_logprobs", p.top_logprobs(), 0, openai::kMaxChatTopLogprobs)) return e;
    top = p.top_logprobs();
  }
  if (auto e = openai::SetChatLogprobs(WantsLogprobs(p), top, &r)) return e;
  if (auto e = openai::CheckMinTokens(r.params)) return e;
  openai::SetStreamFlags(flags, &r);
  *out = std::move(r);
  return std::nullopt;
}

std::optional<ApiError> ToTokenizeRequest(const v1::TokenizeRequest& request, const openai::RequestLimits& limits,
                                          openai::TokenizeRequest* out) {
  openai::TokenizeRequest r;
  r.model = limits.served_model_name;
  if (request.has_text()) {
    r.prompt = request.text().text();
    r.add_special_tokens = !request.text().has_add_special_tokens() || request.text().add_special_tokens();
  } else {
    r.is_chat = true;
    r.add_special_tokens = false;
    if (auto e = ReadMessages(request.chat(), &r.messages)) return e;
    if (auto e = openai::ParseTools(NoFields(), &r.tools)) return e;
    if (auto e = openai::ParseTemplateKwargs(NoFields(), &r.template_kwargs)) return e;
    r.add_generation_prompt = !request.chat().has_add_generation_prompt() || request.chat().add_generation_prompt();
  }
  *out = std::move(r);
  return std::nullopt;
}

StatusOr<GenerateInput> BuildGenerateInput(const openai::RequestModel& model, const v1::GenerateRequest& request,
                                           const std::string& request_id) {
  if (request.request_id().size() > kMaxRequestIdBytes) {
    return InvalidArgument("'request_id' must be at most " + std::to_string(kMaxRequestIdBytes) + " bytes");
  }
  RETURN_IF_ERROR(CheckGrpcOnly(request));
  GenerateInput in;
  std::optional<ApiError> err;
  if (request.has_chat()) {
    openai::ChatRequest parsed;
    openai::PreparedChat prepared;
    err = ToChatRequest(request, model.limits, &parsed);
    if (!err) err = openai::PrepareParsedChat(model, std::move(parsed), &prepared);
    if (!err) in = std::move(prepared.input);
  } else {
    openai::CompletionRequest parsed;
    openai::PreparedCompletion prepared;
    err = ToCompletionRequest(request, model.limits, &parsed);
    if (!err) err = openai::PrepareParsedCompletion(model, std::move(parsed), &prepared);
    if (!err) in = std::move(prepared.inputs[0]);  // one prompt
  }
  if (err) return StatusFromApiError(*err, GrpcFieldOf(err->param, request));
  in.request.id = request.request_id().empty() ? request_id : request.request_id();
  return in;
}

StatusOr<std::vector<int32_t>> TokenizePrompt(const openai::RequestModel& model, const v1::TokenizeRequest& request) {
  if (request.prompt_case() == v1::TokenizeRequest::PROMPT_NOT_SET) {
    return InvalidArgument("'prompt' is required: set 'text' or 'chat'");
  }
  openai::TokenizeRequest parsed;
  std::vector<int32_t> ids;
  std::optional<ApiError> err = ToTokenizeRequest(request, model.limits, &parsed);
  if (!err) err = openai::PrepareParsedTokenize(model, parsed, &ids);
  if (err) return StatusFromApiError(*err);
  return ids;
}

namespace {

void FillLogprob(const LogprobEntry& e, v1::TokenLogprob* out) {
  out->set_token_id(e.token_id);
  out->set_token(e.token);
  out->set_logprob(e.logprob);
  out->set_bytes(std::string(e.bytes.begin(), e.bytes.end()));
  for (const LogprobEntry& t : e.top) {
    v1::TopLogprob* a = out->add_top();
    a->set_token_id(t.token_id);
    a->set_token(t.token);
    a->set_logprob(t.logprob);
    a->set_bytes(std::string(t.bytes.begin(), t.bytes.end()));
  }
}

}  // namespace

void AppendDelta(const ChoiceDelta& delta, v1::ChoiceDelta* out) {
  out->set_index(delta.index);
  out->mutable_text()->append(delta.text);
  out->mutable_token_ids()->Add(delta.token_ids.begin(), delta.token_ids.end());
  for (const LogprobEntry& e : delta.logprobs) FillLogprob(e, out->add_logprobs());
  if (delta.finish_reason != FinishReason::kNone) {
    out->set_finish_reason(FinishReasonName(delta.finish_reason));
    if (delta.stop_string) {
      out->set_stop_string(*delta.stop_string);
    } else if (delta.stop_token_id) {
      out->set_stop_token_id(*delta.stop_token_id);
    }
  }
}

void FillUsage(const GenerationUpdate& update, v1::Usage* usage) {
  usage->set_prompt_tokens(update.prompt_tokens);
  usage->set_completion_tokens(update.completion_tokens);
  usage->set_cached_tokens(update.cached_tokens);
}

}  // namespace tessera::grpc_api
