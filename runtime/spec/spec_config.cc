#include "runtime/spec/spec_config.h"

#include <set>

#include <nlohmann/json.hpp>

namespace tessera {
namespace {

using json = nlohmann::json;

Status Bad(const std::string& msg) { return InvalidArgument("--speculative-config: " + msg); }

StatusOr<int32_t> IntField(const json& j, const std::string& name, int64_t lo, int64_t hi) {
  const json& v = j.at(name);
  if (!v.is_number_integer()) return Bad(name + " must be an integer");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) {
    return Bad(name + " must be in " + std::to_string(lo) + ".." + std::to_string(hi) + " (got " +
               std::to_string(x) + ")");
  }
  return static_cast<int32_t>(x);
}

}  // namespace

const char* SpecMethodName(SpecMethod m) { return m == SpecMethod::kNgram ? "ngram" : "draft_model"; }

StatusOr<SpeculativeConfig> ParseSpeculativeConfig(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("not valid JSON: " + text);
  if (!j.is_object()) return Bad("expected a JSON object, e.g. {\"method\": \"ngram\", \"num_speculative_tokens\": 4}");
  static const std::set<std::string> kKnown = {"method", "num_speculative_tokens", "prompt_lookup_min",
                                               "prompt_lookup_max", "model", "disable_by_batch_size",
                                               "max_verify_tokens", "min_draft_acceptance"};
  for (const auto& [key, value] : j.items()) {
    if (!kKnown.count(key)) {
      return Bad("unknown or unsupported field '" + key +
                 "' (supported: method, num_speculative_tokens, prompt_lookup_min, prompt_lookup_max, model, "
                 "disable_by_batch_size, max_verify_tokens, min_draft_acceptance)");
    }
  }
  SpeculativeConfig c;
  std::string method;
  if (j.contains("method")) {
    if (!j["method"].is_string()) return Bad("method must be a string");
    method = j["method"].get<std::string>();
  }
  std::string model;
  if (j.contains("model")) {
    if (!j["model"].is_string()) return Bad("model must be a string");
    model = j["model"].get<std::string>();
  }
  // vLLM's spellings: method "ngram" (older: model "[ngram]"), "draft_model";
  // without a method, a model path means a draft model.
  if (method.empty()) {
    if (model == "[ngram]" || model == "ngram") {
      method = "ngram";
      model.clear();
    } else if (!model.empty()) {
      method = "draft_model";
    } else {
      return Bad("method is required (\"ngram\" or \"draft_model\")");
    }
  }
  if (method == "ngram" || method == "[ngram]") {
    c.method = SpecMethod::kNgram;
    if (!model.empty() && model != "[ngram]" && model != "ngram") {
      return Bad("model is not used by method \"ngram\" (got '" + model + "')");
    }
    model.clear();
  } else if (method == "draft_model") {
    c.method = SpecMethod::kDraftModel;
    if (model.empty()) return Bad("model is required for method \"draft_model\" (the draft checkpoint)");
  } else {
    return Bad("method '" + method + "' is not supported (supported: \"ngram\", \"draft_model\")");
  }
  c.model = model;
  if (!j.contains("num_speculative_tokens")) return Bad("num_speculative_tokens is required");
  ASSIGN_OR_RETURN(c.num_speculative_tokens, IntField(j, "num_speculative_tokens", 1, kMaxSpeculativeTokens));
  const bool has_min = j.contains("prompt_lookup_min"), has_max = j.contains("prompt_lookup_max");
  if ((has_min || has_max) && c.method != SpecMethod::kNgram) {
    return Bad(std::string(has_min ? "prompt_lookup_min" : "prompt_lookup_max") + " applies to method \"ngram\" only");
  }
  if (has_min) {
    ASSIGN_OR_RETURN(c.prompt_lookup_min, IntField(j, "prompt_lookup_min", 1, 1024));
  }
  if (has_max) {
    ASSIGN_OR_RETURN(c.prompt_lookup_max, IntField(j, "prompt_lookup_max", 1, 1024));
  }
  // As vLLM: one bound given sets the other.
  if (has_min && !has_max) c.prompt_lookup_max = c.prompt_lookup_min;
  if (has_max && !has_min) c.prompt_lookup_min = c.prompt_lookup_max;
  if (c.prompt_lookup_min > c.prompt_lookup_max) {
    return Bad("prompt_lookup_min (" + std::to_string(c.prompt_lookup_min) + ") must not exceed prompt_lookup_max (" +
               std::to_string(c.prompt_lookup_max) + ")");
  }
  if (j.contains("disable_by_batch_size")) {
    ASSIGN_OR_RETURN(c.disable_by_batch_size, IntField(j, "disable_by_batch_size", 1, 1 << 20));
  }
  if (j.contains("max_verify_tokens")) {
    ASSIGN_OR_RETURN(c.max_verify_tokens, IntField(j, "max_verify_tokens", 2, 1 << 20));
  }
  if (j.contains("min_draft_acceptance")) {
    const json& v = j["min_draft_acceptance"];
    if (!v.is_number() || v.get<double>() < 0.0 || v.get<double>() >= 1.0) {
      return Bad("min_draft_acceptance must be a number in [0, 1) (got " + v.dump() + ")");
    }
    c.min_draft_acceptance = v.get<double>();
  }
  return c;
}

}  // namespace tessera
