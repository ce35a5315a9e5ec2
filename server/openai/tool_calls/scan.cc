#include "server/openai/tool_calls/scan.h"

#include "server/openai/json_body.h"

namespace tessera::openai::tools {

using Json = nlohmann::ordered_json;

size_t PartialTagSuffix(std::string_view text, std::string_view tag) {
  const size_t max = std::min(text.size(), tag.size() - 1);
  for (size_t n = max; n > 0; --n) {
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  }
  return 0;
}

size_t JsonValueScanner::Advance(std::string_view text) {
  for (; pos_ < text.size(); ++pos_) {
    const char c = text[pos_];
    if (in_string_) {
      if (escape_) {
        escape_ = false;
      } else if (c == '\\') {
        escape_ = true;
      } else if (c == '"') {
        in_string_ = false;
      }
      continue;
    }
    if (c == '"') {
      in_string_ = true;
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (c == '}' || c == ']') {
      if (--depth_ == 0) return ++pos_;
    }
  }
  return std::string_view::npos;
}

std::optional<Json> ParseJsonText(std::string_view text) {
  Json j;
  if (ParseJsonBounded(text, JsonLimits{.max_depth = 64}, &j)) return std::nullopt;
  return j;
}

std::string JsonText(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::optional<ToolCall> ToolCallFromJson(const Json& j) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  ToolCall call;
  call.name = name->get<std::string>();
  if (args == j.end() || args->is_null()) {
    call.arguments = "{}";
  } else if (args->is_object()) {
    call.arguments = JsonText(*args);
  } else {
    return std::nullopt;
  }
  return call;
}

std::optional<ToolCall> ParseToolCallObject(std::string_view json) {
  std::optional<Json> j = ParseJsonText(json);
  if (!j) return std::nullopt;
  return ToolCallFromJson(*j);
}

size_t SkipSpace(std::string_view text, size_t from) {
  while (from < text.size() && IsJsonSpace(text[from])) ++from;
  return from;
}

}  // namespace tessera::openai::tools
