#include "server/openai/request_common.h"

#include "server/openai/json_body.h"

#include <algorithm>

#include <charconv>
#include <cmath>
#include <limits>

namespace tessera::openai {
namespace {

// A short rendering of a client value for error messages.
std::string Abbrev(const Json& v) {
  std::string s = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (s.size() > 64) s = s.substr(0, 61) + "...";
  return s;
}

std::string P(std::string_view param) { return std::string(param); }

// Every fault of `stop` gets the same words, whichever is found first.
std::optional<ApiError> ReadStop(const Json& body, SamplingParams* params) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  std::vector<std::string> stop;
  if (it->is_string()) {
    stop.push_back(it->get_ref<const std::string&>());
  } else if (it->is_array() && it->size() <= static_cast<size_t>(kMaxStopStrings)) {
    for (const Json& s : *it) {
      if (!s.is_string()) return StopError(*it);
      stop.push_back(s.get_ref<const std::string&>());
    }
  } else {
    return StopError(*it);
  }
  if (!StopFits(stop)) return StopError(*it);
  if (auto e = RefuseEmptyStop(stop)) return e;
  params->stop = std::move(stop);
  return std::nullopt;
}

std::optional<ApiError> ReadStopTokenIds(const Json& body, const RequestLimits& limits, SamplingParams* params) {
  auto it = body.find("stop_token_ids");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_array() || it->size() > kMaxStopTokenIds) return StopTokenIdsError(*it);
  params->stop_token_ids.clear();
  for (const Json& t : *it) {
    if (!IsTokenId(t, limits.model.vocab_size)) return StopTokenIdsError(t);
    params->stop_token_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return std::nullopt;
}

// Keys are decimal token ids; values numbers in [-100, 100].
std::optional<ApiError> ReadLogitBias(const Json& body, const RequestLimits& limits, SamplingParams* params) {
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object() || it->size() > kMaxLogitBias) return LogitBiasSizeError(*it);
  params->logit_bias.clear();
  const int64_t vocab = limits.model.vocab_size;
  for (const auto& [key, value] : it->items()) {
    int64_t id = -1;
    const char* end = key.data() + key.size();
    auto [ptr, ec] = std::from_chars(key.data(), end, id);
    if (key.empty() || ec != std::errc() || ptr != end || id < 0 || id > std::numeric_limits<int32_t>::max() ||
        (vocab > 0 && id >= vocab)) {
      return LogitBiasKeyError(key);
    }
    if (!value.is_number() || !(value.get<double>() >= -100.0 && value.get<double>() <= 100.0)) {
      return LogitBiasValueError(value);
    }
    params->logit_bias[static_cast<int32_t>(id)] = static_cast<float>(value.get<double>());
  }
  return std::nullopt;
}

std::optional<ApiError> ReadStreamOptions(const Json& body, StreamFlags* flags) {
  auto it = body.find("stream_options");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return TypeError("stream_options", "an object", *it);
  if (!flags->stream) {
    return BadRequest("'stream_options' can only be set when 'stream' is true", "stream_options");
  }
  if (auto e = ReadBool(*it, "include_usage", "stream_options.include_usage", &flags->include_usage)) return e;
  return ReadBool(*it, "continuous_usage_stats", "stream_options.continuous_usage_stats",
                  &flags->continuous_usage);
}

}  // namespace

ApiError TypeError(std::string_view param, std::string_view expect, const Json& value) {
  return BadRequest("'" + P(param) + "' must be " + P(expect) + ", got " + Abbrev(value), P(param));
}

ApiError IntRangeError(std::string_view param, int64_t lo, int64_t hi, const Json& shown) {
  return TypeError(param, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", shown);
}

ApiError NumberRangeError(std::string_view param, double lo, double hi, bool lo_open, const Json& shown) {
  auto fmt = [](double d) {
    std::string s = Json(d).dump();
    if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
    return s;
  };
  return TypeError(param, "a number in " + std::string(lo_open ? "(" : "[") + fmt(lo) + ", " + fmt(hi) + "]", shown);
}

std::optional<ApiError> CheckInt(std::string_view param, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) return IntRangeError(param, lo, hi, Json(v));
  return std::nullopt;
}

std::optional<ApiError> CheckNumber(std::string_view param, double v, double lo, double hi, bool lo_open) {
  if (!std::isfinite(v) || v > hi || v < lo || (lo_open && v == lo)) {
    return NumberRangeError(param, lo, hi, lo_open, Json(v));
  }
  return std::nullopt;
}

bool StopFits(const std::vector<std::string>& stop) {
  if (stop.size() > static_cast<size_t>(kMaxStopStrings)) return false;
  for (const std::string& s : stop) {
    if (s.size() > kMaxStopStringBytes) return false;
  }
  return true;
}

ApiError StopError(const Json& shown) {
  return TypeError("stop", "a string or an array of at most 16 strings of at most 1024 bytes", shown);
}

std::optional<ApiError> RefuseEmptyStop(const std::vector<std::string>& stop) {
  for (const std::string& s : stop) {
    if (s.empty()) return BadRequest("'stop' must not contain an empty string", "stop");
  }
  return std::nullopt;
}

ApiError StopTokenIdsError(const Json& shown) {
  return TypeError("stop_token_ids", "an array of at most 1024 token ids inside the vocabulary", shown);
}

ApiError LogitBiasSizeError(const Json& shown) {
  return TypeError("logit_bias", "an object of at most 1024 token id -> bias entries", shown);
}

ApiError LogitBiasKeyError(std::string_view key) {
  return BadRequest("'logit_bias' keys must be token ids inside the vocabulary, got \"" +
                        std::string(key.substr(0, 32)) + "\"",
                    "logit_bias");
}

ApiError LogitBiasValueError(const Json& shown) {
  return TypeError("logit_bias", "an object whose values are numbers in [-100, 100]", shown);
}

std::optional<ApiError> CheckCacheSalt(const std::string& salt) {
  if (salt.empty() || salt.size() > kMaxCacheSaltBytes) {
    return TypeError("cache_salt", "a non-empty string of at most " + std::to_string(kMaxCacheSaltBytes) + " bytes",
                     Json(salt));
  }
  return std::nullopt;
}

std::optional<ApiError> CheckMinTokens(const SamplingParams& params) {
  if (params.max_tokens && params.min_tokens > *params.max_tokens) {
    return BadRequest("'min_tokens' must not exceed 'max_tokens'", "min_tokens");
  }
  return std::nullopt;
}

std::optional<ApiError> ParseBodyObject(std::string_view body, Json* out) {
  Json j;
  if (auto e = ParseJsonBounded(body, JsonLimits{.max_depth = kMaxJsonDepth}, &j)) return e;
  if (!j.is_object()) return BadRequest("The request body must be a JSON object");
  *out = std::move(j);
  return std::nullopt;
}

std::optional<ApiError> ParseModel(const Json& body, const RequestLimits& limits, std::string* model) {
  *model = limits.served_model_name;
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return TypeError("model", "a string", *it);
  const std::string& name = it->get_ref<const std::string&>();
  if (!limits.served_model_name.empty() && name != limits.served_model_name) {
    ApiError e = BadRequest("The model `" + name.substr(0, 256) + "` does not exist.", "model", "model_not_found");
    e.status = ApiStatus::kNotFound;
    return e;
  }
  if (limits.served_model_name.empty()) *model = name;
  return std::nullopt;
}

std::optional<ApiError> ReadBool(const Json& obj, const char* key, std::string_view param, bool* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return TypeError(param, "a boolean", *it);
  *out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> ReadString(const Json& obj, const char* key, std::string_view param, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return TypeError(param, "a string", *it);
  *out = it->get_ref<const std::string&>();
  return std::nullopt;
}

std::optional<ApiError> ReadInt(const Json& obj, const char* key, std::string_view param, int64_t lo, int64_t hi,
                                std::optional<int64_t>* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  // number_unsigned above INT64_MAX never fits; number_float is rejected.
  if (!it->is_number_integer() || (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t{INT64_MAX})) {
    return IntRangeError(param, lo, hi, *it);
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) return IntRangeError(param, lo, hi, *it);
  *out = v;
  return std::nullopt;
}

std::optional<ApiError> ReadNumber(const Json& obj, const char* key, std::string_view param, double lo, double hi,
                                   bool lo_open, std::optional<double>* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return NumberRangeError(param, lo, hi, lo_open, *it);
  const double v = it->get<double>();
  if (!std::isfinite(v) || v > hi || v < lo || (lo_open && v == lo)) {
    return NumberRangeError(param, lo, hi, lo_open, *it);
  }
  *out = v;
  return std::nullopt;
}

bool IsTokenId(const Json& v, int64_t vocab_size) {
  if (!v.is_number_integer()) return false;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    return u <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max()) &&
           (vocab_size <= 0 || u < static_cast<uint64_t>(vocab_size));
  }
  return IsTokenId(v.get<int64_t>(), vocab_size);
}

bool IsTokenId(int64_t id, int64_t vocab_size) {
  return id >= 0 && id <= std::numeric_limits<int32_t>::max() && (vocab_size <= 0 || id < vocab_size);
}

std::optional<ApiError> ReadPromptCacheRetention(const Json& body, RetentionAsk* out) {
  constexpr int64_t kMinute = int64_t{60} * 1000000000;
  auto it = body.find("prompt_cache_retention");
  if (it == body.end() || it->is_null()) return std::nullopt;
  int64_t ttl = 0;
  if (*it == "in_memory") ttl = 5 * kMinute;
  if (*it == "24h") ttl = 24 * 60 * kMinute;
  if (ttl == 0) return TypeError("prompt_cache_retention", "\"in_memory\" or \"24h\"", *it);
  out->marks = {{.messages = -1, .tokens = -1, .ttl_ns = ttl}};
  out->field = "prompt_cache_retention";
  return std::nullopt;
}

std::optional<ApiError> ParseSamplingFields(const Json& body, const RequestLimits& limits, SamplingParams* params,
                                            StreamFlags* flags) {
  constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
  constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min();
  auto num = [&body](const char* key, double lo, double hi, bool lo_open, float* dst) -> std::optional<ApiError> {
    std::optional<double> v;
    if (auto e = ReadNumber(body, key, key, lo, hi, lo_open, &v)) return e;
    if (v) *dst = static_cast<float>(*v);
    return std::nullopt;
  };
  auto i32 = [&body](const char* key, int64_t lo, int64_t hi, int32_t* dst) -> std::optional<ApiError> {
    std::optional<int64_t> v;
    if (auto e = ReadInt(body, key, key, lo, hi, &v)) return e;
    if (v) *dst = static_cast<int32_t>(*v);
    return std::nullopt;
  };
  for (const NumberField& f : kNumberFields) {
    if (auto e = num(f.name, f.lo, f.hi, f.lo_open, &(params->*f.dst))) return e;
  }
  if (auto e = i32("top_k", -1, kI32Max, &params->top_k)) return e;
  if (params->top_k == 0) params->top_k = -1;  // vLLM: 0 disables, like -1
  if (auto e = i32("min_tokens", 0, kI32Max, &params->min_tokens)) return e;
  if (auto e = i32("n", 1, limits.model.max_n, &params->n)) return e;
  if (auto e = i32("priority", kI32Min, kI32Max, &params->priority)) return e;

  std::optional<int64_t> i;
  if (auto e = ReadInt(body, "seed", "seed", std::numeric_limits<int64_t>::min(),
                       std::numeric_limits<int64_t>::max(), &i)) {
    return e;
  }
  if (i) params->seed = static_cast<uint64_t>(*i);
  i.reset();
  if (auto e = ReadInt(body, "best_of", "best_of", 1, kI32Max, &i)) return e;
  if (i && *i != params->n) return BadRequest("best_of is not supported (it must be null or equal n)", "best_of");

  if (auto e = ReadBool(body, "ignore_eos", "ignore_eos", &params->ignore_eos)) return e;
  if (auto e = ReadStop(body, params)) return e;
  if (auto e = ReadStopTokenIds(body, limits, params)) return e;
  if (auto e = ReadLogitBias(body, limits, params)) return e;

  std::string ignored;
  if (auto e = ReadString(body, "user", "user", &ignored)) return e;
  if (auto it = body.find("cache_salt"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) {
      return TypeError("cache_salt", "a non-empty string of at most " + std::to_string(kMaxCacheSaltBytes) + " bytes",
                       *it);
    }
    if (auto e = CheckCacheSalt(it->get_ref<const std::string&>())) return e;
    flags->cache_salt = it->get<std::string>();
  }
  if (auto e = ReadPromptCacheRetention(body, &flags->retention)) return e;
  if (auto e = ReadBool(body, "skip_special_tokens", "skip_special_tokens", &flags->skip_special_tokens)) return e;
  if (auto e = ReadBool(body, "include_stop_str_in_output", "include_stop_str_in_output",
                        &flags->include_stop_str_in_output)) {
    return e;
  }
  if (auto e = ReadBool(body, "stream", "stream", &flags->stream)) return e;
  return ReadStreamOptions(body, flags);
}

std::optional<ApiError> RefuseUnenforced(const Json& body) {
  // Structured outputs (response_format, structured_outputs, guided_*) are
  // enforced: see structured_request.h.
  static constexpr const char* kUnenforced[] = {"allowed_token_ids", "bad_words", "logits_processors", "functions",
                                                "function_call"};
  for (const char* key : kUnenforced) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) continue;
    return BadRequest("'" + std::string(key) +
                          "' is not supported by this server (this token constraint is not enforced); remove it",
                      key, "unsupported_parameter");
  }
  if (auto it = body.find("use_beam_search"); it != body.end() && !it->is_null() && *it != false) {
    return BadRequest("'use_beam_search' is not supported by this server", "use_beam_search",
                      "unsupported_parameter");
  }
  return std::nullopt;
}

ApiError ContextLengthError(int64_t prompt_tokens, std::optional<int32_t> max_tokens, int64_t max_model_len,
                            std::string_view param) {
  const std::string what = param == "messages" ? "messages" : "prompt";
  std::string msg = "This model's maximum context length is " + std::to_string(max_model_len) + " tokens. ";
  if (max_tokens) {
    msg += "However, you requested " + std::to_string(prompt_tokens + *max_tokens) + " tokens (" +
           std::to_string(prompt_tokens) + " in the " + what + ", " + std::to_string(*max_tokens) +
           " in the completion). Please reduce the length of the " + what + " or completion.";
  } else {
    msg += "However, your request has " + std::to_string(prompt_tokens) +
           " input tokens. Please reduce the length of the " + what + ".";
  }
  return BadRequest(std::move(msg), P(param), "context_length_exceeded");
}

}  // namespace tessera::openai
