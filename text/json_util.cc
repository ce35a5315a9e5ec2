#include "text/json_util.h"

namespace tessera::text {

Status GetString(const Json& j, const std::string& path, const char* key, std::string* out, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return InvalidArgument(path + ": missing field '" + key + "'");
    return Status::Ok();
  }
  if (!it->is_string()) return InvalidArgument(path + "." + key + ": expected a string");
  *out = it->get<std::string>();
  return Status::Ok();
}

Status GetBool(const Json& j, const std::string& path, const char* key, bool* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean()) return InvalidArgument(path + "." + key + ": expected a boolean");
  *out = it->get<bool>();
  return Status::Ok();
}

Status GetInt(const Json& j, const std::string& path, const char* key, long long* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_number_integer()) return InvalidArgument(path + "." + key + ": expected an integer");
  *out = it->get<long long>();
  return Status::Ok();
}

StatusOr<std::string> GetType(const Json& j, const std::string& path) {
  if (!j.is_object()) return InvalidArgument(path + ": expected an object");
  std::string type;
  RETURN_IF_ERROR(GetString(j, path, "type", &type, /*required=*/true));
  return type;
}

StatusOr<PatternSpec> GetPattern(const Json& j, const std::string& path) {
  auto it = j.find("pattern");
  if (it == j.end() || !it->is_object()) return InvalidArgument(path + ": missing object field 'pattern'");
  PatternSpec spec;
  if (auto s = it->find("String"); s != it->end() && s->is_string()) {
    spec.text = s->get<std::string>();
  } else if (auto r = it->find("Regex"); r != it->end() && r->is_string()) {
    spec.is_regex = true;
    spec.text = r->get<std::string>();
  } else {
    return InvalidArgument(path + ".pattern: expected {\"String\": ...} or {\"Regex\": ...}");
  }
  return spec;
}

}  // namespace tessera::text
