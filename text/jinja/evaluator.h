// Evaluator: renders a parsed template (AST) against a set of variables with
// jinja2 semantics (scoping per loop iteration and macro, Python value rules).
// One Evaluator per render call; the AST is shared read-only, so concurrent
// renders of one Template are safe. Work, output size and recursion are bounded
// so hostile templates or inputs cannot hang or exhaust the stack.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/builtins.h"

namespace tessera::jinja {

struct RenderLimits {
  int64_t max_output_bytes = 16 << 20;  // any single string, and the output
  int64_t max_work = 20'000'000;        // loop iterations + elements/bytes produced
  int max_depth = 400;                  // nested evaluation frames (macros included)
};

struct RenderOptions {
  RenderLimits limits;
  // Clock for strftime_now(); < 0 means the system clock (UTC).
  int64_t now_unix_seconds = -1;
};

// Renders `nodes`; `variables` are the template's context (messages, tools,
// bos_token, ...). Throws TemplateError; see template.h for the Status API.
std::string RenderNodes(const NodeList& nodes, const std::vector<std::pair<std::string, Value>>& variables,
                        const RenderOptions& options);

}  // namespace tessera::jinja
