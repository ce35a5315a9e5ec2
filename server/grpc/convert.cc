#include "server/grpc/convert.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <random>

namespace tessera::grpc_api {

grpc::Status ToGrpc(const Status& status) {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (status.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kInvalidArgument: code = grpc::StatusCode::INVALID_ARGUMENT; break;
    case StatusCode::kNotFound: code = grpc::StatusCode::NOT_FOUND; break;
    case StatusCode::kOutOfRange: code = grpc::StatusCode::OUT_OF_RANGE; break;
    case StatusCode::kDataLoss: code = grpc::StatusCode::DATA_LOSS; break;
    case StatusCode::kUnimplemented: code = grpc::StatusCode::UNIMPLEMENTED; break;
    case StatusCode::kResourceExhausted: code = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case StatusCode::kFailedPrecondition: code = grpc::StatusCode::FAILED_PRECONDITION; break;
    case StatusCode::kInternal: code = grpc::StatusCode::INTERNAL; break;
    case StatusCode::kUnavailable: code = grpc::StatusCode::UNAVAILABLE; break;
    case StatusCode::kDeadlineExceeded: code = grpc::StatusCode::DEADLINE_EXCEEDED; break;
    case StatusCode::kCancelled: code = grpc::StatusCode::CANCELLED; break;
  }
  return grpc::Status(code, status.message());
}

Status CheckTokenIds(const std::vector<int32_t>& ids, int64_t vocab_size, const char* field) {
  for (int32_t id : ids) {
    if (id < 0 || (vocab_size > 0 && id >= vocab_size)) {
      return InvalidArgument(std::string("'") + field + "' has token id " + std::to_string(id) +
                             ", outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
    }
  }
  return Status::Ok();
}

StatusOr<std::vector<int32_t>> EncodeText(const ServingEngine& engine, const v1::TextPrompt& text) {
  return engine.tokenizer().Encode(text.text(), !text.has_add_special_tokens() || text.add_special_tokens());
}

StatusOr<std::vector<int32_t>> EncodeChat(const ServingEngine& engine, const v1::ChatPrompt& chat) {
  if (chat.messages().empty()) return InvalidArgument("'messages' must not be empty");
  if (static_cast<size_t>(chat.messages().size()) > kMaxMessages) {
    return InvalidArgument("'messages' holds more than " + std::to_string(kMaxMessages) + " messages");
  }
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (const v1::ChatMessage& m : chat.messages()) {
    if (m.role().empty() || m.role().size() > kMaxRoleBytes) {
      return InvalidArgument("'messages.role' must be a non-empty string of at most " +
                             std::to_string(kMaxRoleBytes) + " bytes");
    }
    messages.push_back({{"role", m.role()}, {"content", m.content()}});
  }
  const bool add_generation_prompt = !chat.has_add_generation_prompt() || chat.add_generation_prompt();
  ASSIGN_OR_RETURN(std::string text, engine.RenderChat(messages, nlohmann::ordered_json(), add_generation_prompt,
                                                       nlohmann::ordered_json::object()));
  return engine.tokenizer().Encode(text, /*add_special_tokens=*/false);
}

namespace {

Status FillSamplingParams(const v1::SamplingParams& p, const ModelLimits& limits, SamplingParams* out) {
  if (p.has_max_tokens()) out->max_tokens = p.max_tokens();
  if (p.has_min_tokens()) out->min_tokens = p.min_tokens();
  if (p.has_temperature()) out->temperature = p.temperature();
  if (p.has_top_p()) out->top_p = p.top_p();
  if (p.has_top_k()) out->top_k = p.top_k();
  if (p.has_min_p()) out->min_p = p.min_p();
  if (p.has_presence_penalty()) out->presence_penalty = p.presence_penalty();
  if (p.has_frequency_penalty()) out->frequency_penalty = p.frequency_penalty();
  if (p.has_repetition_penalty()) out->repetition_penalty = p.repetition_penalty();
  if (p.has_seed()) out->seed = p.seed();
  if (static_cast<size_t>(p.stop().size()) > kMaxStopStrings) {
    return InvalidArgument("'stop' holds more than " + std::to_string(kMaxStopStrings) + " strings");
  }
  for (const std::string& s : p.stop()) {
    if (s.size() > kMaxStopStringBytes) {
      return InvalidArgument("'stop' strings must be at most " + std::to_string(kMaxStopStringBytes) + " bytes");
    }
    out->stop.push_back(s);
  }
  if (static_cast<size_t>(p.stop_token_ids().size()) > kMaxStopTokenIds) {
    return InvalidArgument("'stop_token_ids' holds more than " + std::to_string(kMaxStopTokenIds) + " ids");
  }
  out->stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  if (p.has_ignore_eos()) out->ignore_eos = p.ignore_eos();
  if (p.has_n()) out->n = p.n();
  if (p.has_logprobs()) out->logprobs = p.logprobs();
  if (p.has_top_logprobs()) {
    out->top_logprobs = p.top_logprobs();
    if (p.top_logprobs() > 0 && !p.has_logprobs()) out->logprobs = true;
  }
  if (static_cast<size_t>(p.logit_bias().size()) > kMaxLogitBias) {
    return InvalidArgument("'logit_bias' holds more than " + std::to_string(kMaxLogitBias) + " entries");
  }
  for (const auto& [token, bias] : p.logit_bias()) out->logit_bias[token] = bias;
  return out->Validate(limits);
}

}  // namespace

StatusOr<GenerateInput> BuildGenerateInput(const ServingEngine& engine, const v1::GenerateRequest& request,
                                           const std::string& request_id) {
  const ModelLimits& limits = engine.limits();
  GenerateInput in;
  if (request.request_id().size() > kMaxRequestIdBytes) {
    return InvalidArgument("'request_id' must be at most " + std::to_string(kMaxRequestIdBytes) + " bytes");
  }
  in.request_id = request.request_id().empty() ? request_id : request.request_id();

  bool chat = false;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText: {
      ASSIGN_OR_RETURN(in.prompt_token_ids, EncodeText(engine, request.text()));
      break;
    }
    case v1::GenerateRequest::kTokenIds: {
      const auto& ids = request.token_ids().ids();
      if (ids.size() > limits.max_model_len) {
        return OutOfRange("This model's maximum context length is " + std::to_string(limits.max_model_len) +
                          " tokens. However, the prompt has " + std::to_string(ids.size()) + " tokens.");
      }
      in.prompt_token_ids.assign(ids.begin(), ids.end());
      RETURN_IF_ERROR(CheckTokenIds(in.prompt_token_ids, limits.vocab_size, "token_ids"));
      break;
    }
    case v1::GenerateRequest::kChat: {
      chat = true;
      ASSIGN_OR_RETURN(in.prompt_token_ids, EncodeChat(engine, request.chat()));
      break;
    }
    case v1::GenerateRequest::PROMPT_NOT_SET:
      return InvalidArgument("'prompt' is required: set one of 'text', 'token_ids' or 'chat'");
  }
  if (in.prompt_token_ids.empty()) return InvalidArgument("'prompt' is empty (no tokens)");

  const v1::SamplingParams& p = request.params();
  RETURN_IF_ERROR(FillSamplingParams(p, limits, &in.params));
  const int64_t prompt_len = static_cast<int64_t>(in.prompt_token_ids.size());
  if (!chat && !in.params.max_tokens) {
    // The completions default, shortened to fit the context (as HTTP does).
    const int64_t room = limits.max_model_len - prompt_len;
    if (room >= 1) in.params.max_tokens = static_cast<int32_t>(std::min<int64_t>(kDefaultMaxTokens, room));
  }
  RETURN_IF_ERROR(CheckContextLength(prompt_len, in.params, limits));
  in.skip_special_tokens = !p.has_skip_special_tokens() || p.skip_special_tokens();
  in.include_stop_str_in_output = p.has_include_stop_str_in_output() && p.include_stop_str_in_output();
  return in;
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

std::string NewRequestId() {
  static const uint64_t salt = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  static std::atomic<uint64_t> counter{0};
  char buf[48];
  std::snprintf(buf, sizeof(buf), "grpc-%016llx%08llx", static_cast<unsigned long long>(salt),
                static_cast<unsigned long long>(counter.fetch_add(1)));
  return buf;
}

bool CheckBearer(const std::string& authorization, const std::vector<std::string>& keys) {
  static constexpr std::string_view kPrefix = "Bearer ";
  if (authorization.size() < kPrefix.size() || authorization.compare(0, kPrefix.size(), kPrefix) != 0) return false;
  const std::string_view given = std::string_view(authorization).substr(kPrefix.size());
  bool match = false;
  for (const std::string& key : keys) {
    // Touch every byte of the longer string so timing reveals no prefix match.
    const size_t n = std::max(given.size(), key.size());
    unsigned diff = given.size() == key.size() ? 0u : 1u;
    for (size_t i = 0; i < n; ++i) {
      const unsigned char a = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
      const unsigned char b = i < key.size() ? static_cast<unsigned char>(key[i]) : 0;
      diff |= static_cast<unsigned>(a ^ b);
    }
    match |= (diff == 0) && !key.empty();
  }
  return match;
}

}  // namespace tessera::grpc_api
