// `tool_choice` and the output it allows. Under "none" and "auto" the model
// writes in its own format (tool_call_parser.h); under "required" and a named
// function the server must constrain the output with the grammar engine
// (server/structured/) to ToolCallOutputSchema, and then parses it with
// MakeRequiredToolCallParser / MakeNamedToolCallParser — vLLM's scheme, so the
// output is plain JSON whatever the model family. Pure; thread-safe.
#pragma once

#include <optional>
#include <string>

#include "server/http/responses.h"
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

// The JSON Schema the whole output must match: for kRequired an array (1..n
// items, at most 1 without parallel_tool_calls) of {"name": <one of the
// tools>, "parameters": <that tool's parameters schema>}, every tool an anyOf
// branch; for kNamed the named tool's parameters schema ({"type":"object"}
// when it has none). Null for kNone / kAuto (nothing to enforce).
Json ToolCallOutputSchema(const Json& tools, const ToolChoice& choice, bool parallel_tool_calls);

}  // namespace tessera::openai::tools
