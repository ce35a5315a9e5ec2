// GBNF (llama.cpp's grammar format) -> Grammar. Supported: rules
// `name ::= alternatives`, string literals "..." and character classes [...]
// / [^...] with \x \u \U \t \n \r \\ \" \] \[ \- escapes, `.` (any code
// point), grouping ( ), repetitions * + ? {m} {m,} {m,n}, # comments; newlines
// end a rule except inside parentheses or after `|`. Rule names are
// [a-zA-Z0-9_-]+; the start rule is `root`. Not supported (an error naming it):
// llama.cpp's token references <[id]>, left recursion.
//
// Pure; thread-safe. Cost: linear in the text plus the size of expanded
// repetitions (bounded by CompileLimits).
#pragma once

#include <chrono>
#include <string_view>

#include "common/status.h"
#include "structured/grammar.h"

namespace tessera::structured {

// INVALID_ARGUMENT with "line L, column C: what" on a syntax error, or naming
// the bound that was exceeded.
StatusOr<Grammar> ParseGbnf(std::string_view text, const CompileLimits& limits,
                            std::chrono::steady_clock::time_point deadline);

// A GBNF string literal for `bytes` (quotes included; non-printable bytes and
// quotes escaped), e.g. for building GBNF text.
std::string GbnfLiteral(std::string_view bytes);

}  // namespace tessera::structured
