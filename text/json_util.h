// Small helpers for reading tokenizer.json components with errors that name
// the JSON path ("pre_tokenizer.pretokenizers[1].pattern"). nlohmann exceptions
// never escape these helpers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tessera::text {

using Json = nlohmann::json;

// Reads an optional string field; error if present with the wrong type.
Status GetString(const Json& j, const std::string& path, const char* key, std::string* out, bool required);
Status GetBool(const Json& j, const std::string& path, const char* key, bool* out);
Status GetInt(const Json& j, const std::string& path, const char* key, long long* out);
// The "type" field of a component object.
StatusOr<std::string> GetType(const Json& j, const std::string& path);
// A {"String": s} or {"Regex": r} pattern object.
struct PatternSpec {
  bool is_regex = false;
  std::string text;
};
StatusOr<PatternSpec> GetPattern(const Json& j, const std::string& path);

inline Status Unsupported(const std::string& path, const std::string& type) {
  return Unimplemented(path + ": unsupported type '" + type + "'");
}

// The parts of a "Sequence" component: `parse(element, element_path)` on each
// element of the required array `key` (paths "path.key[i]"), in order.
template <typename T, typename Parse>
StatusOr<std::vector<std::unique_ptr<T>>> ParseParts(const Json& j, const std::string& path, const char* key,
                                                     Parse parse) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return InvalidArgument(path + ": missing array field '" + key + "'");
  std::vector<std::unique_ptr<T>> parts;
  for (size_t i = 0; i < it->size(); ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<T> part, parse((*it)[i], path + "." + key + "[" + std::to_string(i) + "]"));
    parts.push_back(std::move(part));
  }
  return parts;
}

}  // namespace tessera::text
