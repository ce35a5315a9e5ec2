#include "runtime/sim/cost_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tessera::sim {

StepShape ShapeOf(const SchedulerOutput& plan, const Scheduler& scheduler) {
  StepShape shape;
  for (const ScheduledSequence& s : plan.seqs) {
    const int64_t n = static_cast<int64_t>(s.token_ids.size());
    const Sequence* seq = scheduler.GetSequence(s.seq_id);
    const bool decode = seq != nullptr && s.start_position >= seq->num_prompt_tokens && n == 1 + s.num_draft_tokens;
    if (decode) {
      ++shape.num_decode_seqs;
      shape.decode_tokens += n;
      shape.decode_context += s.start_position + n;
    } else {
      ++shape.num_prefill_seqs;
      shape.prefill_tokens += n;
      shape.prefill_attention += n * s.start_position + n * (n + 1) / 2;
    }
  }
  return shape;
}

const std::array<CoefficientKey, 6>& LinearCoefficientKeys() {
  static const std::array<CoefficientKey, 6> keys = {{
      {"base_ms", &LinearCoefficients::base_ms},
      {"per_prefill_token_ms", &LinearCoefficients::per_prefill_token_ms},
      {"per_prefill_attention_ms", &LinearCoefficients::per_prefill_attention_ms},
      {"per_decode_seq_ms", &LinearCoefficients::per_decode_seq_ms},
      {"per_decode_token_ms", &LinearCoefficients::per_decode_token_ms},
      {"per_decode_context_ms", &LinearCoefficients::per_decode_context_ms},
  }};
  return keys;
}

StatusOr<LinearCostModel> LinearCostModel::FromJson(const std::string& text, const std::string& name) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(name + ": not a JSON object");
  if (!j.contains("model") || j["model"] != "linear") {
    return InvalidArgument(name + ": 'model' must be \"linear\" (the one cost model so far)");
  }
  LinearCoefficients c;
  for (const auto& [key, value] : j.items()) {
    if (key == "model" || key == "comment") continue;
    if (key == "version") {
      if (!value.is_number_integer() || value.get<int64_t>() != kCostModelVersion) {
        return InvalidArgument(name + ": 'version' must be " + std::to_string(kCostModelVersion) +
                               " (this binary's cost-model format), not " + value.dump());
      }
      continue;
    }
    if (key == "calibration") {
      if (!value.is_object()) return InvalidArgument(name + ": 'calibration' must be an object");
      continue;
    }
    double LinearCoefficients::*dst = nullptr;
    for (const CoefficientKey& k : LinearCoefficientKeys()) {
      if (key == k.key) dst = k.field;
    }
    if (dst == nullptr) return InvalidArgument(name + ": unknown key '" + key + "'");
    if (!value.is_number() || !(value.get<double>() >= 0) || !std::isfinite(value.get<double>())) {
      return InvalidArgument(name + ": '" + key + "' must be a finite number >= 0");
    }
    c.*dst = value.get<double>();
  }
  return LinearCostModel(c);
}

std::string LinearCostModel::ToJson(const std::string& calibration_json) const {
  nlohmann::ordered_json j = {{"model", "linear"}, {"version", kCostModelVersion}};
  for (const CoefficientKey& k : LinearCoefficientKeys()) j[k.key] = c_.*k.field;
  if (!calibration_json.empty()) j["calibration"] = nlohmann::ordered_json::parse(calibration_json);
  return j.dump(2) + "\n";
}

StatusOr<LinearCostModel> LinearCostModel::FromFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return NotFound("cost model " + path + ": cannot read it");
  std::stringstream ss;
  ss << f.rdbuf();
  return FromJson(ss.str(), "cost model " + path);
}

int64_t LinearCostModel::StepNs(const StepShape& s) const {
  const double ms = c_.base_ms + c_.per_prefill_token_ms * static_cast<double>(s.prefill_tokens) +
                    c_.per_prefill_attention_ms * static_cast<double>(s.prefill_attention) +
                    c_.per_decode_seq_ms * static_cast<double>(s.num_decode_seqs) +
                    c_.per_decode_token_ms * static_cast<double>(s.decode_tokens) +
                    c_.per_decode_context_ms * static_cast<double>(s.decode_context);
  // Clamped to [1 ns, 1e6 s]: a step has a duration, and llround stays defined.
  return static_cast<int64_t>(std::llround(std::clamp(ms * 1e6, 1.0, 1e15)));
}

int64_t ReplayCostModel::StepNs(const StepShape& shape) const {
  if (step_ns_.empty()) return 1;
  const size_t i = std::min(static_cast<size_t>(std::max<int64_t>(shape.ordinal, 0)), step_ns_.size() - 1);
  return std::max<int64_t>(step_ns_[i], 1);
}

}  // namespace tessera::sim
