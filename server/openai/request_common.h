// Shared pieces of OpenAI request parsing: the limits a request is checked
// against, typed field readers that name the offending parameter, the
// sampling fields common to /v1/completions and /v1/chat/completions, and
// the context-length error. Pure functions; thread-safe; nothing throws.
//
// Conventions (vLLM-like): unknown fields are ignored; an explicit null means
// "use the default"; integers must be JSON integers (5.0 is rejected) that
// fit their type; booleans must be JSON booleans.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "scheduler/sampling_params.h"
#include "server/openai/api_error.h"

namespace tessera::openai {

using Json = nlohmann::ordered_json;

// What a request is checked against.
struct RequestLimits {
  std::string served_model_name;  // "" : any `model` is accepted
  ModelLimits model;
};

inline constexpr int kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 1024;
inline constexpr size_t kMaxLogitBias = 1024;
inline constexpr size_t kMaxStopTokenIds = 1024;
inline constexpr size_t kMaxPrompts = 64;
inline constexpr size_t kMaxCacheSaltBytes = 1024;
inline constexpr int kMaxJsonDepth = 64;  // deeper request bodies are refused (400)

// 400 "'<param>' must be <expect>, got <value>" (value abbreviated).
ApiError TypeError(std::string_view param, std::string_view expect, const Json& value);

// Parses `body` (linear time and bounded size: json_body.h); it must be a
// JSON object (else 400, param null).
std::optional<ApiError> ParseBodyObject(std::string_view body, Json* out);

// `model`: absent/null -> served name; a string other than the served name
// -> 404 model_not_found; another type -> 400.
std::optional<ApiError> ParseModel(const Json& body, const RequestLimits& limits, std::string* model);

// Field readers. Absent or null leaves *out unchanged and succeeds; a value
// of the wrong type or out of range is a 400 naming `param`.
std::optional<ApiError> ReadBool(const Json& obj, const char* key, std::string_view param, bool* out);
std::optional<ApiError> ReadString(const Json& obj, const char* key, std::string_view param,
                                   std::string* out);
std::optional<ApiError> ReadInt(const Json& obj, const char* key, std::string_view param, int64_t lo,
                                int64_t hi, std::optional<int64_t>* out);
// Number in [lo, hi]; lo_open excludes lo.
std::optional<ApiError> ReadNumber(const Json& obj, const char* key, std::string_view param, double lo,
                                   double hi, bool lo_open, std::optional<double>* out);

// A token id: a JSON integer in [0, vocab_size) (any >= 0 when vocab_size is 0).
bool IsTokenId(const Json& v, int64_t vocab_size);
bool IsTokenId(int64_t id, int64_t vocab_size);

// Retention (docs/architecture.md, "Retention"): a prompt prefix a request
// asked to keep cached for a time, before tokenization.
struct RetentionMark {
  int64_t messages = -1;  // chat: the first `messages` chat messages (0: the tools alone); -1: the whole prompt
  int64_t tokens = -1;    // the prefix in tokens once resolved against the rendered prompt; -1: the whole prompt
  int64_t ttl_ns = 0;
};
struct RetentionAsk {
  std::vector<RetentionMark> marks;  // empty: nothing retained
  std::string field;                 // the field that asked, named in budget refusals
};
// OpenAI's prompt_cache_retention: "in_memory" (5 minutes, Anthropic's default
// and the low end of OpenAI's 5-10 minutes of inactivity) or "24h"; null or
// absent: nothing retained. Retains the whole prompt. 400 naming it otherwise.
std::optional<ApiError> ReadPromptCacheRetention(const Json& body, RetentionAsk* out);

// Flags shared by both generation endpoints besides SamplingParams.
struct StreamFlags {
  bool stream = false;
  bool include_usage = false;
  bool continuous_usage = false;
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
  // vLLM's cache_salt: a non-empty string (at most kMaxCacheSaltBytes) that
  // keeps this request's prefix-cache blocks apart from other salts'.
  std::string cache_salt;
  RetentionAsk retention;  // prompt_cache_retention
};

// Copies the flags into a parsed request (CompletionRequest or ChatRequest).
template <typename Parsed>
void SetStreamFlags(const StreamFlags& flags, Parsed* r) {
  r->stream = flags.stream;
  r->include_usage = flags.include_usage;
  r->continuous_usage = flags.continuous_usage;
  r->skip_special_tokens = flags.skip_special_tokens;
  r->include_stop_str_in_output = flags.include_stop_str_in_output;
  r->cache_salt = flags.cache_salt;
  r->retention = flags.retention;
}

// Reads temperature, top_p, top_k, min_p, penalties, seed, stop,
// stop_token_ids, ignore_eos, min_tokens, n, best_of, logit_bias, priority,
// user, cache_salt, prompt_cache_retention, stream, stream_options, skip_special_tokens,
// include_stop_str_in_output. Not max_tokens or logprobs (they differ).
std::optional<ApiError> ParseSamplingFields(const Json& body, const RequestLimits& limits,
                                            SamplingParams* params, StreamFlags* flags);

// --- The refusals' words and ranges, shared with front ends whose fields are
// already typed (gRPC: server/grpc/convert.h), so that both refuse the same
// request with the same message. `shown`: the offending value as JSON shows it.

// "'<param>' must be an integer in [lo, hi], got <shown>".
ApiError IntRangeError(std::string_view param, int64_t lo, int64_t hi, const Json& shown);
// "'<param>' must be a number in [lo, hi] (or (lo, hi]), got <shown>".
ApiError NumberRangeError(std::string_view param, double lo, double hi, bool lo_open, const Json& shown);
// Typed checks: a value outside the range is the error above, the value shown.
std::optional<ApiError> CheckInt(std::string_view param, int64_t v, int64_t lo, int64_t hi);
std::optional<ApiError> CheckNumber(std::string_view param, double v, double lo, double hi, bool lo_open);

// The float sampling fields, in the order ParseSamplingFields reads them
// (a request with several faults is refused for the first), with their ranges.
struct NumberField {
  const char* name;
  double lo;
  double hi;
  bool lo_open;
  float SamplingParams::*dst;
};
inline constexpr NumberField kNumberFields[] = {
    {"temperature", 0, 2, false, &SamplingParams::temperature},
    {"top_p", 0, 1, true, &SamplingParams::top_p},
    {"min_p", 0, 1, false, &SamplingParams::min_p},
    {"presence_penalty", -2, 2, false, &SamplingParams::presence_penalty},
    {"frequency_penalty", -2, 2, false, &SamplingParams::frequency_penalty},
    {"repetition_penalty", 0, 2, true, &SamplingParams::repetition_penalty},
};

// stop: at most kMaxStopStrings strings of at most kMaxStopStringBytes.
// An empty stop string is refused in SamplingParams::Validate's words.
bool StopFits(const std::vector<std::string>& stop);
ApiError StopError(const Json& shown);
std::optional<ApiError> RefuseEmptyStop(const std::vector<std::string>& stop);
// stop_token_ids: at most kMaxStopTokenIds ids inside the vocabulary.
ApiError StopTokenIdsError(const Json& shown);
// logit_bias: at most kMaxLogitBias entries, keys token ids inside the
// vocabulary (`key` as sent), values in [-100, 100].
ApiError LogitBiasSizeError(const Json& shown);
ApiError LogitBiasKeyError(std::string_view key);
ApiError LogitBiasValueError(const Json& shown);
// cache_salt: a non-empty string of at most kMaxCacheSaltBytes.
std::optional<ApiError> CheckCacheSalt(const std::string& salt);
// min_tokens above max_tokens.
std::optional<ApiError> CheckMinTokens(const SamplingParams& params);

// Fields that ask for behaviour the server does not enforce
// (allowed_token_ids, bad_words, logits_processors, legacy functions, beam
// search) are a 400 naming the field when set, never silently ignored.
// Structured outputs are parsed by ParseStructuredOutput (structured_request.h).
std::optional<ApiError> RefuseUnenforced(const Json& body);

// 400 context_length_exceeded, vLLM's wording. `param`: "prompt" or "messages".
ApiError ContextLengthError(int64_t prompt_tokens, std::optional<int32_t> max_tokens, int64_t max_model_len,
                            std::string_view param);

}  // namespace tessera::openai
