#include "server/grpc/convert.h"

#include <cmath>

namespace tessera::grpc_api {

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

using Json = nlohmann::json;  // std::map objects: building a large logit_bias stays O(n log n)

// JSON has no NaN or infinity (nlohmann would write null, i.e. "unset").
Status PutFloat(const char* key, float v, Json* body) {
  if (!std::isfinite(v)) return InvalidArgument(std::string("'") + key + "' must be a finite number");
  (*body)[key] = static_cast<double>(v);
  return Status::Ok();
}

// Dumps `body`; strings that are not UTF-8 (protobuf normally refuses them
// already) are refused as HTTP refuses such bytes in a body.
StatusOr<std::string> Dump(const Json& body) {
  try {
    return body.dump(-1, ' ', false, Json::error_handler_t::strict);
  } catch (const Json::exception&) {
    return InvalidArgument("the request holds a string that is not valid UTF-8");
  }
}

Status PutSamplingParams(const v1::SamplingParams& p, bool chat, Json* body) {
  if (p.has_max_tokens()) (*body)["max_tokens"] = p.max_tokens();
  if (p.has_min_tokens()) (*body)["min_tokens"] = p.min_tokens();
  if (p.has_temperature()) RETURN_IF_ERROR(PutFloat("temperature", p.temperature(), body));
  if (p.has_top_p()) RETURN_IF_ERROR(PutFloat("top_p", p.top_p(), body));
  if (p.has_top_k()) (*body)["top_k"] = p.top_k();
  if (p.has_min_p()) RETURN_IF_ERROR(PutFloat("min_p", p.min_p(), body));
  if (p.has_presence_penalty()) RETURN_IF_ERROR(PutFloat("presence_penalty", p.presence_penalty(), body));
  if (p.has_frequency_penalty()) RETURN_IF_ERROR(PutFloat("frequency_penalty", p.frequency_penalty(), body));
  if (p.has_repetition_penalty()) RETURN_IF_ERROR(PutFloat("repetition_penalty", p.repetition_penalty(), body));
  // HTTP's seed is an int64 reinterpreted as the uint64 the engine uses: same bits both ways.
  if (p.has_seed()) (*body)["seed"] = static_cast<int64_t>(p.seed());
  if (!p.stop().empty()) (*body)["stop"] = Json(std::vector<std::string>(p.stop().begin(), p.stop().end()));
  if (!p.stop_token_ids().empty()) {
    (*body)["stop_token_ids"] = Json(std::vector<int32_t>(p.stop_token_ids().begin(), p.stop_token_ids().end()));
  }
  if (p.has_ignore_eos()) (*body)["ignore_eos"] = p.ignore_eos();
  if (p.has_n()) (*body)["n"] = p.n();
  // Proto: logprobs unset + top_logprobs set means logprobs on.
  const bool logprobs = p.has_logprobs() ? p.logprobs() : p.has_top_logprobs();
  if (chat) {
    if (p.has_logprobs() || p.has_top_logprobs()) (*body)["logprobs"] = logprobs;
    if (p.has_top_logprobs()) (*body)["top_logprobs"] = p.top_logprobs();
  } else if (logprobs) {
    (*body)["logprobs"] = p.has_top_logprobs() ? p.top_logprobs() : 0;
  } else if (p.has_top_logprobs()) {
    return InvalidArgument("'top_logprobs' requires 'logprobs' to be true");
  }
  if (!p.logit_bias().empty()) {
    // At most one entry past the path's limit: the verdict ("too many") is the
    // same, and the parser never pays for a huge object.
    Json bias = Json::object();
    for (const auto& [token, value] : p.logit_bias()) {
      if (bias.size() > openai::kMaxLogitBias) break;
      if (!std::isfinite(value)) return InvalidArgument("'logit_bias' values must be finite numbers");
      bias[std::to_string(token)] = static_cast<double>(value);
    }
    (*body)["logit_bias"] = std::move(bias);
  }
  if (p.has_skip_special_tokens()) (*body)["skip_special_tokens"] = p.skip_special_tokens();
  if (p.has_include_stop_str_in_output()) (*body)["include_stop_str_in_output"] = p.include_stop_str_in_output();
  if (p.has_response_format_type()) {
    Json rf = {{"type", p.response_format_type()}};
    if (p.has_json_schema()) rf["json_schema"] = {{"name", "schema"}, {"schema", p.json_schema()}};
    (*body)["response_format"] = std::move(rf);
  } else if (p.has_json_schema()) {
    return InvalidArgument("'json_schema' needs response_format_type \"json_schema\"");
  }
  if (p.has_guided_json()) (*body)["guided_json"] = p.guided_json();
  if (p.has_guided_regex()) (*body)["guided_regex"] = p.guided_regex();
  if (!p.guided_choice().empty()) {
    (*body)["guided_choice"] = Json(std::vector<std::string>(p.guided_choice().begin(), p.guided_choice().end()));
  }
  if (p.has_guided_grammar()) (*body)["guided_grammar"] = p.guided_grammar();
  return Status::Ok();
}

// The GenerateRequest field an HTTP param stands for, where the names differ.
std::string GrpcFieldOf(const std::string& param, const v1::GenerateRequest& request) {
  if (param == "prompt") return request.has_token_ids() ? "token_ids" : "text";
  if (param == "logprobs" && !request.has_chat()) return "top_logprobs";
  return "";
}

Json ChatMessages(const v1::ChatPrompt& chat) {
  Json messages = Json::array();
  for (const v1::ChatMessage& m : chat.messages()) messages.push_back({{"role", m.role()}, {"content", m.content()}});
  return messages;
}

}  // namespace

StatusOr<std::string> GenerateRequestToJson(const v1::GenerateRequest& request, bool* chat) {
  Json body = Json::object();
  *chat = false;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText:
      body["prompt"] = request.text().text();
      if (request.text().has_add_special_tokens()) body["add_special_tokens"] = request.text().add_special_tokens();
      break;
    case v1::GenerateRequest::kTokenIds:
      body["prompt"] = Json(std::vector<int32_t>(request.token_ids().ids().begin(), request.token_ids().ids().end()));
      break;
    case v1::GenerateRequest::kChat:
      *chat = true;
      body["messages"] = ChatMessages(request.chat());
      if (request.chat().has_add_generation_prompt()) {
        body["add_generation_prompt"] = request.chat().add_generation_prompt();
      }
      break;
    case v1::GenerateRequest::PROMPT_NOT_SET:
      return InvalidArgument("'prompt' is required: set one of 'text', 'token_ids' or 'chat'");
  }
  RETURN_IF_ERROR(PutSamplingParams(request.params(), *chat, &body));
  if (request.has_cache_salt()) body["cache_salt"] = request.cache_salt();
  if (request.has_kv_transfer_params()) {
    Json kv = Json::parse(request.kv_transfer_params(), nullptr, /*allow_exceptions=*/false);
    if (!kv.is_object()) return InvalidArgument("'kv_transfer_params' must be a JSON object (as text)");
    body["kv_transfer_params"] = std::move(kv);
  }
  return Dump(body);
}

StatusOr<std::string> TokenizeRequestToJson(const v1::TokenizeRequest& request) {
  Json body = Json::object();
  switch (request.prompt_case()) {
    case v1::TokenizeRequest::kText:
      body["prompt"] = request.text().text();
      if (request.text().has_add_special_tokens()) body["add_special_tokens"] = request.text().add_special_tokens();
      break;
    case v1::TokenizeRequest::kChat:
      body["messages"] = ChatMessages(request.chat());
      if (request.chat().has_add_generation_prompt()) {
        body["add_generation_prompt"] = request.chat().add_generation_prompt();
      }
      break;
    case v1::TokenizeRequest::PROMPT_NOT_SET:
      return InvalidArgument("'prompt' is required: set 'text' or 'chat'");
  }
  return Dump(body);
}

StatusOr<GenerateInput> BuildGenerateInput(const openai::RequestModel& model, const v1::GenerateRequest& request,
                                           const std::string& request_id) {
  if (request.request_id().size() > kMaxRequestIdBytes) {
    return InvalidArgument("'request_id' must be at most " + std::to_string(kMaxRequestIdBytes) + " bytes");
  }
  bool chat = false;
  ASSIGN_OR_RETURN(std::string body, GenerateRequestToJson(request, &chat));
  GenerateInput in;
  if (chat) {
    openai::PreparedChat prepared;
    if (auto err = openai::PrepareChat(model, body, &prepared)) {
      return StatusFromApiError(*err, GrpcFieldOf(err->param, request));
    }
    in = std::move(prepared.input);
  } else {
    openai::PreparedCompletion prepared;
    if (auto err = openai::PrepareCompletion(model, body, &prepared)) {
      return StatusFromApiError(*err, GrpcFieldOf(err->param, request));
    }
    if (prepared.inputs.size() != 1) return InvalidArgument("'prompt' must be a single prompt");
    in = std::move(prepared.inputs[0]);
  }
  in.request_id = request.request_id().empty() ? request_id : request.request_id();
  return in;
}

StatusOr<std::vector<int32_t>> TokenizePrompt(const openai::RequestModel& model, const v1::TokenizeRequest& request) {
  ASSIGN_OR_RETURN(std::string body, TokenizeRequestToJson(request));
  openai::TokenizeRequest parsed;
  std::vector<int32_t> ids;
  if (auto err = openai::PrepareTokenize(model, body, &parsed, &ids)) return StatusFromApiError(*err);
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
