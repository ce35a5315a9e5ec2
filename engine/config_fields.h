// FieldReader: typed access to one JSON object of an HF config, with errors that
// name the file and the field. Shared by the config parsers (model_config.cc and
// the per-family files beside it); not part of the engine's public API.
#pragma once

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/model_config.h"

namespace tessera::config_internal {

using json = nlohmann::json;

// Field readers: missing → default (or error when required), wrong type → error.
class FieldReader {
 public:
  FieldReader(const json& obj, std::string label) : obj_(obj), label_(std::move(label)) {}

  Status Int(const char* key, int64_t* out, bool required, int64_t min_value = 1) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) {
      if (required) return InvalidArgument(label_ + ": missing required field '" + key + "'");
      return Status::Ok();
    }
    if (!it->is_number_integer()) {
      return InvalidArgument(label_ + ": field '" + key + "' must be an integer, got " + it->dump());
    }
    int64_t v = it->get<int64_t>();
    if (v < min_value) {
      return InvalidArgument(label_ + ": field '" + key + "' must be >= " + std::to_string(min_value) +
                             ", got " + std::to_string(v));
    }
    *out = v;
    return Status::Ok();
  }

  Status Double(const char* key, double* out, bool required, double min_exclusive) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) {
      if (required) return InvalidArgument(label_ + ": missing required field '" + key + "'");
      return Status::Ok();
    }
    if (!it->is_number()) {
      return InvalidArgument(label_ + ": field '" + key + "' must be a number, got " + it->dump());
    }
    double v = it->get<double>();
    if (!(v > min_exclusive)) {
      std::ostringstream os;
      os << label_ << ": field '" << key << "' must be > " << min_exclusive << ", got " << v;
      return InvalidArgument(os.str());
    }
    *out = v;
    return Status::Ok();
  }

  Status Bool(const char* key, bool* out) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return Status::Ok();
    if (!it->is_boolean()) {
      return InvalidArgument(label_ + ": field '" + key + "' must be true or false, got " + it->dump());
    }
    *out = it->get<bool>();
    return Status::Ok();
  }

  Status String(const char* key, std::string* out) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return Status::Ok();
    if (!it->is_string()) {
      return InvalidArgument(label_ + ": field '" + key + "' must be a string, got " + it->dump());
    }
    *out = it->get<std::string>();
    return Status::Ok();
  }

  // A required list of exactly `len` finite numbers > 0 (longrope factors).
  Status PositiveList(const char* key, size_t len, const std::string& len_why, std::vector<double>* out) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return InvalidArgument(label_ + ": missing required field '" + key + "'");
    if (!it->is_array() || it->size() != len) {
      return InvalidArgument(label_ + ": field '" + key + "' must be a list of " + std::to_string(len) +
                             " numbers (" + len_why + "), got " +
                             (it->is_array() ? std::to_string(it->size()) + " entries" : it->dump()));
    }
    out->clear();
    for (size_t i = 0; i < it->size(); ++i) {
      const json& v = (*it)[i];
      const double x = v.is_number() ? v.get<double>() : 0.0;
      if (!v.is_number() || !std::isfinite(x) || !(x > 0.0)) {
        return InvalidArgument(label_ + ": field '" + key + "' entry " + std::to_string(i) +
                               " must be a finite number > 0, got " + v.dump());
      }
      out->push_back(x);
    }
    return Status::Ok();
  }

  // An int or a list of ints (eos_token_id takes both forms).
  Status IntList(const char* key, std::vector<int64_t>* out) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return Status::Ok();
    auto bad = [&] {
      return InvalidArgument(label_ + ": field '" + key + "' must be an integer or a list of integers, got " +
                             it->dump());
    };
    if (it->is_number_integer()) {
      out->assign(1, it->get<int64_t>());
      return Status::Ok();
    }
    if (!it->is_array()) return bad();
    out->clear();
    for (const auto& v : *it) {
      if (!v.is_number_integer()) return bad();
      out->push_back(v.get<int64_t>());
    }
    return Status::Ok();
  }

 private:
  const json& obj_;
  std::string label_;
};

// DeepseekV2ForCausalLM / DeepseekV3ForCausalLM traits on top of the common fields
// (engine/model_config_deepseek.cc).
Status ParseDeepseek(const json& root, const std::string& label, ModelConfig* c);

}  // namespace tessera::config_internal
