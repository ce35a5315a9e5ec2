// Small text scanners shared by the tool-call and reasoning parsers. Pure;
// no allocation beyond their outputs; thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tessera::openai::tools {

// Length of the longest proper suffix of `text` that is a prefix of `tag`:
// the bytes a streaming parser must hold back because the tag may be
// completed by the next piece of output.
size_t PartialTagSuffix(std::string_view text, std::string_view tag);

// Finds where one JSON object or array ends, incrementally: Advance() resumes
// where the previous call stopped, so a value fed in n pieces costs O(size)
// in total. Tracks only nesting and strings (escapes included); it does not
// validate — ParseToolCallObject does that once the value is complete.
class JsonValueScanner {
 public:
  // `text` must start with '{' or '[' and extend the text of earlier calls
  // (same start). Returns the index one past the closing bracket, or npos
  // while the value is still open.
  size_t Advance(std::string_view text);
  void Reset() { *this = JsonValueScanner(); }

 private:
  size_t pos_ = 0;
  int64_t depth_ = 0;
  bool in_string_ = false;
  bool escape_ = false;
};

// One parsed call as a model writes it.
struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object as compact text (OpenAI's function.arguments)
};

// `json` is one call as {"name": string, "arguments"|"parameters": object}
// (arguments absent or null means {}); nullopt when it is not valid JSON
// (bounded depth, UTF-8), or not that shape.
std::optional<ToolCall> ParseToolCallObject(std::string_view json);
// A value already parsed (an array element).
std::optional<ToolCall> ToolCallFromJson(const nlohmann::ordered_json& value);
// Parses bounded JSON (depth 64); nullopt when invalid.
std::optional<nlohmann::ordered_json> ParseJsonText(std::string_view text);
// Compact JSON text of `value` (invalid UTF-8 replaced, never throws).
std::string JsonText(const nlohmann::ordered_json& value);

inline bool IsJsonSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
// Index of the first non-whitespace byte at or after `from` (size() if none).
size_t SkipSpace(std::string_view text, size_t from = 0);

}  // namespace tessera::openai::tools
