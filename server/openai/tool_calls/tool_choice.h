// `tool_choice` and the output it allows. Under "none" and "auto" the model
// writes in its own format (tool_call_parser.h); under "required" and a named
// function the server constrains the output with the grammar engine
// (structured/) to the calls ToolCallGrammar (tool_grammar.h) allows.
// Pure; thread-safe.
#pragma once

#include <optional>
#include <string>

#include "server/openai/api_error.h"
#include "server/openai/request_common.h"

namespace tessera::openai::tools {

enum class ToolChoiceMode { kNone, kAuto, kRequired, kNamed };

struct ToolChoice {
  ToolChoiceMode mode = ToolChoiceMode::kNone;
  std::string function_name;  // kNamed only
};

// `tool_choice` given `tools` (already validated by ParseTools; null if none).
// Absent/null: "auto" when there are tools, else "none". "required" and a
// named function ({"type":"function","function":{"name":...}}) need tools,
// and the name must be one of them; errors are 400s naming "tool_choice".
std::optional<ApiError> ParseToolChoice(const Json& body, const Json& tools, ToolChoice* out);

}  // namespace tessera::openai::tools
