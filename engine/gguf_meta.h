// Typed lookups of GGUF metadata whose errors name the key (engine/gguf_model.cc and the
// per-architecture readers beside it). Holds references: the contents outlive it.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "common/status.h"
#include "engine/gguf.h"

namespace tessera {

// Typed metadata lookups; errors name the key.
class GgufMeta {
 public:
  GgufMeta(const GgufContents& g, std::string label) : g_(g), label_(std::move(label)) {}
  StatusOr<int64_t> Int(const std::string& key, std::optional<int64_t> def = std::nullopt) const {
    const GgufValue* v = g_.Find(key);
    if (!v) {
      if (def) return *def;
      return InvalidArgument(label_ + ": missing required metadata key '" + key + "'");
    }
    auto i = v->AsInt();
    if (!i) return InvalidArgument(label_ + ": metadata '" + key + "' must be an integer");
    return *i;
  }
  StatusOr<double> Num(const std::string& key, std::optional<double> def = std::nullopt) const {
    const GgufValue* v = g_.Find(key);
    if (!v) {
      if (def) return *def;
      return InvalidArgument(label_ + ": missing required metadata key '" + key + "'");
    }
    auto d = v->AsDouble();
    if (!d || !std::isfinite(*d)) return InvalidArgument(label_ + ": metadata '" + key + "' must be a finite number");
    return *d;
  }
  StatusOr<bool> Bool(const std::string& key, bool def) const {
    const GgufValue* v = g_.Find(key);
    if (!v) return def;
    if (v->type != GgufType::kBool) return InvalidArgument(label_ + ": metadata '" + key + "' must be a bool");
    return v->u != 0;
  }
  StatusOr<std::string> Str(const std::string& key, std::optional<std::string> def = std::nullopt) const {
    const GgufValue* v = g_.Find(key);
    if (!v) {
      if (def) return *def;
      return InvalidArgument(label_ + ": missing required metadata key '" + key + "'");
    }
    if (v->type != GgufType::kString) return InvalidArgument(label_ + ": metadata '" + key + "' must be a string");
    return v->str;
  }

  const std::string& label() const { return label_; }
  const GgufValue* Find(const std::string& key) const { return g_.Find(key); }

 private:
  const GgufContents& g_;
  std::string label_;
};

}  // namespace tessera
