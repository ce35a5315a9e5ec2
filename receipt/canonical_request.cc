#include "receipt/canonical_request.h"

#include <charconv>
#include <limits>

namespace tessera::receipt {
namespace {

using json = nlohmann::json;

Status Bad(const std::string& field, const std::string& what) {
  return InvalidArgument("request." + field + ": " + what);
}

StatusOr<const json*> Get(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return Bad(key, "is missing");
  return &*it;
}

template <typename T>
Status ReadInt(const json& j, const char* key, T* out) {
  ASSIGN_OR_RETURN(const json* v, Get(j, key));
  if (!v->is_number_integer()) return Bad(key, "must be an integer");
  const int64_t x = v->get<int64_t>();
  if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max()) return Bad(key, "is out of range");
  *out = static_cast<T>(x);
  return Status::Ok();
}

// Canonical floats are f32 parameters widened to double: narrowing is exact.
Status ReadFloat(const json& j, const char* key, float* out) {
  ASSIGN_OR_RETURN(const json* v, Get(j, key));
  if (!v->is_number()) return Bad(key, "must be a number");
  *out = static_cast<float>(v->get<double>());
  return Status::Ok();
}

Status ReadBool(const json& j, const char* key, bool* out) {
  ASSIGN_OR_RETURN(const json* v, Get(j, key));
  if (!v->is_boolean()) return Bad(key, "must be a boolean");
  *out = v->get<bool>();
  return Status::Ok();
}

template <typename T>
Status ReadIntArray(const json& j, const char* key, std::vector<T>* out) {
  ASSIGN_OR_RETURN(const json* v, Get(j, key));
  if (!v->is_array()) return Bad(key, "must be an array of integers");
  out->clear();
  out->reserve(v->size());
  for (const json& e : *v) {
    if (!e.is_number_integer()) return Bad(key, "must be an array of integers");
    const int64_t x = e.get<int64_t>();
    if (x < std::numeric_limits<T>::min() || x > std::numeric_limits<T>::max()) return Bad(key, "is out of range");
    out->push_back(static_cast<T>(x));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ExecutedRequest> ReadCanonicalRequest(const json& j) {
  if (!j.is_object()) return InvalidArgument("request: must be a JSON object");
  ExecutedRequest out;
  Request& r = out.request;
  SamplingParams& p = r.params;
  RETURN_IF_ERROR(ReadIntArray(j, "prompt_token_ids", &r.prompt_token_ids));
  ASSIGN_OR_RETURN(const json* max_tokens, Get(j, "max_tokens"));
  if (!max_tokens->is_null()) {
    int32_t m = 0;
    RETURN_IF_ERROR(ReadInt(j, "max_tokens", &m));
    p.max_tokens = m;
  }
  RETURN_IF_ERROR(ReadInt(j, "min_tokens", &p.min_tokens));
  RETURN_IF_ERROR(ReadFloat(j, "temperature", &p.temperature));
  RETURN_IF_ERROR(ReadFloat(j, "top_p", &p.top_p));
  RETURN_IF_ERROR(ReadInt(j, "top_k", &p.top_k));
  RETURN_IF_ERROR(ReadFloat(j, "min_p", &p.min_p));
  RETURN_IF_ERROR(ReadFloat(j, "presence_penalty", &p.presence_penalty));
  RETURN_IF_ERROR(ReadFloat(j, "frequency_penalty", &p.frequency_penalty));
  RETURN_IF_ERROR(ReadFloat(j, "repetition_penalty", &p.repetition_penalty));
  ASSIGN_OR_RETURN(const json* bias, Get(j, "logit_bias"));
  if (!bias->is_array()) return Bad("logit_bias", "must be an array of [token, bias] pairs");
  for (const json& pair : *bias) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || !pair[1].is_number()) {
      return Bad("logit_bias", "must be an array of [token, bias] pairs");
    }
    p.logit_bias[pair[0].get<int32_t>()] = static_cast<float>(pair[1].get<double>());
  }
  ASSIGN_OR_RETURN(const json* seed, Get(j, "seed"));
  uint64_t s = 0;
  const std::string text = seed->is_string() ? seed->get<std::string>() : std::string();
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), s);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return Bad("seed", "must be a decimal string of a 64-bit unsigned integer");
  }
  p.seed = s;
  ASSIGN_OR_RETURN(const json* stop, Get(j, "stop"));
  if (!stop->is_array()) return Bad("stop", "must be an array of strings");
  for (const json& e : *stop) {
    if (!e.is_string()) return Bad("stop", "must be an array of strings");
    p.stop.push_back(e.get<std::string>());
  }
  RETURN_IF_ERROR(ReadIntArray(j, "stop_token_ids", &p.stop_token_ids));
  RETURN_IF_ERROR(ReadBool(j, "ignore_eos", &p.ignore_eos));
  RETURN_IF_ERROR(ReadInt(j, "n", &p.n));
  RETURN_IF_ERROR(ReadBool(j, "logprobs", &p.logprobs));
  RETURN_IF_ERROR(ReadInt(j, "top_logprobs", &p.top_logprobs));
  ASSIGN_OR_RETURN(const json* prompt_logprobs, Get(j, "prompt_logprobs"));
  if (!prompt_logprobs->is_null()) {
    int32_t n = 0;
    RETURN_IF_ERROR(ReadInt(j, "prompt_logprobs", &n));
    p.prompt_logprobs = n;
  }
  ASSIGN_OR_RETURN(const json* constraint, Get(j, "structured_output"));
  if (!constraint->is_null() && !constraint->is_string()) return Bad("structured_output", "must be a string or null");
  if (constraint->is_string()) out.structured_output = constraint->get<std::string>();
  RETURN_IF_ERROR(ReadBool(j, "skip_special_tokens", &out.skip_special_tokens));
  RETURN_IF_ERROR(ReadBool(j, "include_stop_str_in_output", &out.include_stop_str_in_output));
  for (const auto& [key, value] : j.items()) {
    static const char* kKeys[] = {"prompt_token_ids", "max_tokens", "min_tokens", "temperature", "top_p", "top_k",
                                  "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
                                  "logit_bias", "seed", "stop", "stop_token_ids", "ignore_eos", "n", "logprobs",
                                  "top_logprobs", "prompt_logprobs", "structured_output", "skip_special_tokens",
                                  "include_stop_str_in_output"};
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    if (!known) return Bad(key, "is not a field of the canonical request");
  }
  return out;
}

}  // namespace tessera::receipt
