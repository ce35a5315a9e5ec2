#include "server/grpc/generate_request.h"

#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/openai/json_body.h"
#include "server/openai/request_common.h"

namespace tessera::grpc_api {
namespace {

using Json = nlohmann::json;  // std::map objects: building a large logit_bias stays O(n log n)
using P = v1::SamplingParams;

struct FloatField {
  std::string_view name;
  bool (P::*has)() const;
  float (P::*get)() const;
};

constexpr FloatField kFloatFields[] = {
    {"temperature", &P::has_temperature, &P::temperature},
    {"top_p", &P::has_top_p, &P::top_p},
    {"min_p", &P::has_min_p, &P::min_p},
    {"presence_penalty", &P::has_presence_penalty, &P::presence_penalty},
    {"frequency_penalty", &P::has_frequency_penalty, &P::frequency_penalty},
    {"repetition_penalty", &P::has_repetition_penalty, &P::repetition_penalty},
};

// Dumps `body`; strings that are not UTF-8 (protobuf normally refuses them
// already) are refused as HTTP refuses such bytes in a body.
StatusOr<std::string> Dump(const Json& body) {
  try {
    return body.dump(-1, ' ', false, Json::error_handler_t::strict);
  } catch (const Json::exception&) {
    return InvalidArgument("the request holds a string that is not valid UTF-8");
  }
}

// The logit_bias entries the HTTP path reads: at most one past its limit
// (the verdict, "too many", is the same, and no parser pays for a huge map).
template <typename Fn>
void ForEachLogitBias(const P& p, Fn fn) {
  size_t n = 0;
  for (const auto& [token, value] : p.logit_bias()) {
    if (n++ > openai::kMaxLogitBias) break;
    fn(token, value);
  }
}

void PutSamplingParams(const P& p, bool chat, Json* body) {
  if (p.has_max_tokens()) (*body)["max_tokens"] = p.max_tokens();
  if (p.has_min_tokens()) (*body)["min_tokens"] = p.min_tokens();
  for (const FloatField& f : kFloatFields) {
    if ((p.*f.has)()) (*body)[std::string(f.name)] = static_cast<double>((p.*f.get)());
  }
  if (p.has_top_k()) (*body)["top_k"] = p.top_k();
  // HTTP's seed is an int64 reinterpreted as the uint64 the engine uses: same bits both ways.
  if (p.has_seed()) (*body)["seed"] = static_cast<int64_t>(p.seed());
  if (!p.stop().empty()) (*body)["stop"] = Json(std::vector<std::string>(p.stop().begin(), p.stop().end()));
  if (!p.stop_token_ids().empty()) {
    (*body)["stop_token_ids"] = Json(std::vector<int32_t>(p.stop_token_ids().begin(), p.stop_token_ids().end()));
  }
  if (p.has_ignore_eos()) (*body)["ignore_eos"] = p.ignore_eos();
  if (p.has_n()) (*body)["n"] = p.n();
  if (chat) {
    if (p.has_logprobs() || p.has_top_logprobs()) (*body)["logprobs"] = WantsLogprobs(p);
    if (p.has_top_logprobs()) (*body)["top_logprobs"] = p.top_logprobs();
  } else if (WantsLogprobs(p)) {
    (*body)["logprobs"] = p.has_top_logprobs() ? p.top_logprobs() : 0;
  }
  if (!p.logit_bias().empty()) {
    Json bias = Json::object();
    ForEachLogitBias(p, [&](int32_t token, float value) { bias[std::to_string(token)] = static_cast<double>(value); });
    (*body)["logit_bias"] = std::move(bias);
  }
  if (p.has_skip_special_tokens()) (*body)["skip_special_tokens"] = p.skip_special_tokens();
  if (p.has_include_stop_str_in_output()) (*body)["include_stop_str_in_output"] = p.include_stop_str_in_output();
  if (p.has_response_format_type()) {
    Json rf = {{"type", p.response_format_type()}};
    if (p.has_json_schema()) rf["json_schema"] = {{"name", "schema"}, {"schema", p.json_schema()}};
    (*body)["response_format"] = std::move(rf);
  }
  if (p.has_guided_json()) (*body)["guided_json"] = p.guided_json();
  if (p.has_guided_regex()) (*body)["guided_regex"] = p.guided_regex();
  if (!p.guided_choice().empty()) {
    (*body)["guided_choice"] = Json(std::vector<std::string>(p.guided_choice().begin(), p.guided_choice().end()));
  }
  if (p.has_guided_grammar()) (*body)["guided_grammar"] = p.guided_grammar();
}

}  // namespace

std::optional<float> SamplingFloat(const P& params, std::string_view name) {
  for (const FloatField& f : kFloatFields) {
    if (f.name == name) return (params.*f.has)() ? std::optional<float>((params.*f.get)()) : std::nullopt;
  }
  return std::nullopt;
}

bool WantsLogprobs(const P& p) { return p.has_logprobs() ? p.logprobs() : p.has_top_logprobs(); }

Status CheckGrpcOnly(const v1::GenerateRequest& request) {
  if (request.prompt_case() == v1::GenerateRequest::PROMPT_NOT_SET) {
    return InvalidArgument("'prompt' is required: set one of 'text', 'token_ids' or 'chat'");
  }
  const P& p = request.params();
  // JSON has no NaN or infinity (it would read as null, i.e. "unset").
  for (const FloatField& f : kFloatFields) {
    if ((p.*f.has)() && !std::isfinite((p.*f.get)())) {
      return InvalidArgument("'" + std::string(f.name) + "' must be a finite number");
    }
  }
  if (!request.has_chat() && !WantsLogprobs(p) && p.has_top_logprobs()) {
    return InvalidArgument("'top_logprobs' requires 'logprobs' to be true");
  }
  bool finite = true;
  ForEachLogitBias(p, [&](int32_t, float value) { finite = finite && std::isfinite(value); });
  if (!finite) return InvalidArgument("'logit_bias' values must be finite numbers");
  if (p.has_json_schema() && !p.has_response_format_type()) {
    return InvalidArgument("'json_schema' needs response_format_type \"json_schema\"");
  }
  if (request.has_kv_transfer_params()) {
    nlohmann::ordered_json kv;
    RETURN_IF_ERROR(ParseKvTransferText(request.kv_transfer_params(), &kv));
  }
  return Status::Ok();
}

Status ParseKvTransferText(const std::string& text, nlohmann::ordered_json* out) {
  if (openai::ParseJsonBounded(text, openai::JsonLimits{.max_depth = openai::kMaxJsonDepth}, out) ||
      !out->is_object()) {
    return InvalidArgument("'kv_transfer_params' must be a JSON object (as text)");
  }
  return Status::Ok();
}

StatusOr<std::string> GenerateRequestToJson(const v1::GenerateRequest& request, bool* chat) {
  *chat = false;
  RETURN_IF_ERROR(CheckGrpcOnly(request));
  Json body = Json::object();
  *chat = request.has_chat();
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText:
      body["prompt"] = request.text().text();
      if (request.text().has_add_special_tokens()) body["add_special_tokens"] = request.text().add_special_tokens();
      break;
    case v1::GenerateRequest::kTokenIds:
      body["prompt"] = Json(std::vector<int32_t>(request.token_ids().ids().begin(), request.token_ids().ids().end()));
      break;
    case v1::GenerateRequest::kChat: {
      Json messages = Json::array();
      for (const v1::ChatMessage& m : request.chat().messages()) {
        messages.push_back({{"role", m.role()}, {"content", m.content()}});
      }
      body["messages"] = std::move(messages);
      if (request.chat().has_add_generation_prompt()) {
        body["add_generation_prompt"] = request.chat().add_generation_prompt();
      }
      break;
    }
    case v1::GenerateRequest::PROMPT_NOT_SET: break;  // refused by CheckGrpcOnly
  }
  PutSamplingParams(request.params(), *chat, &body);
  if (request.has_cache_salt()) body["cache_salt"] = request.cache_salt();
  if (request.has_kv_transfer_params()) body["kv_transfer_params"] = Json::parse(request.kv_transfer_params());
  return Dump(body);
}

}  // namespace tessera::grpc_api
