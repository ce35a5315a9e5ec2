// Parser: tokens → AST, following Jinja 3.1's grammar and operator precedence.
// Anything outside the supported subset (unknown tags, filters, tests, globals)
// is rejected here, at load time, with its line and column.
#pragma once

#include <string_view>

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace tessera::jinja {

struct ParseLimits {
  int max_nesting = 128;  // nested expressions/blocks; bounds parser recursion
};

// Throws TemplateError (kSyntax or kUnsupported).
NodeList Parse(std::string_view source, const LexerOptions& lexer_options,
               const ParseLimits& limits = {});

}  // namespace tessera::jinja
