// The grammar that forces tool calls under tool_choice "required" or a named
// function, so the output always parses into calls (never left to chance).
//
// The calls are written in the format the request's output parser reads
// (ForcedToolCallFormat): hermes `<tool_call>\n{"name": .., "arguments": ..}
// \n</tool_call>` and llama3_json `{"name": .., "parameters": ..}` in the
// model's own format (its chat template taught it that markup); otherwise
// (no parser, or mistral, whose [TOOL_CALLS] is a special token a byte
// grammar cannot produce) vLLM's plain JSON: an array of {"name",
// "parameters"} for "required", the arguments object for a named function.
// Each call's arguments follow that tool's `parameters` schema; "required"
// allows any of the tools, one call without parallel_tool_calls, one or more
// with it; a named function allows exactly one call to it.
// Pure; thread-safe.
#pragma once

#include <optional>
#include <string>

#include "server/openai/api_error.h"
#include "server/openai/request_common.h"
#include "server/openai/tool_calls/tool_call_parser.h"
#include "server/openai/tool_calls/tool_choice.h"
#include "structured/grammar.h"

namespace tessera::openai::tools {

enum class ForcedFormat { kHermes, kLlama3Json, kJson };

// The format forced calls are written in under `parser` (see above).
ForcedFormat ForcedToolCallFormat(ToolParserKind parser);

struct ToolGrammarOptions {
  ToolChoice choice;  // kRequired or kNamed
  bool parallel_tool_calls = true;
  ToolParserKind parser = ToolParserKind::kNone;
  // The prompt left a <think> block open (see PromptOpensThink) and a
  // reasoning parser reads the output: the grammar closes it first, so the
  // calls are not taken for reasoning.
  bool close_think = false;
};

// GBNF text (start rule `root`) for `tools` (validated by ParseTools). A tool
// whose parameters schema cannot be compiled -> 400 naming
// `tools[i].function.parameters`; a grammar over the limits -> 400 naming `tools`.
std::optional<ApiError> ToolCallGrammar(const Json& tools, const ToolGrammarOptions& options,
                                        const structured::CompileLimits& limits, std::string* gbnf);

}  // namespace tessera::openai::tools
