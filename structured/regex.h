// Regular expression -> GBNF expression (then compiled like any grammar).
// Supported: literals, escapes (\n \t \r \f \v \0 \xHH \uHHHH and escaped
// punctuation), . (any character but line terminators), classes [...] / [^...]
// with ranges and \d \w \s \D \W \S, groups ( ), (?: ), (?P<n> ), (?<n> ),
// alternation |, quantifiers * + ? {n} {n,} {n,m} (lazy forms accepted: the
// language is the same), ^ at the start and $ at the end. Everything else
// (backreferences, lookaround, \b, flags, possessive quantifiers, anchors
// inside) is an INVALID_ARGUMENT naming it.
//
// What the grammar produces always matches the regex under Python's
// re.fullmatch and JavaScript's RegExp with the u flag: where the two
// differ (\d \w \s are Unicode in Python; . excludes \r and U+2028/9 in JS)
// the grammar allows the intersection (ASCII digits/word characters, no line
// terminators for .).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "structured/grammar.h"

namespace tessera::structured {

struct RegexOptions {
  // Emit the characters as the content of a JSON string: `"` and `\` escaped,
  // control characters as \uXXXX escapes in literals and left out of classes.
  bool json_string = false;
  // JSON Schema `pattern` semantics: unanchored (a match anywhere) unless it
  // starts with ^ / ends with $. false: the whole text must match (fullmatch).
  bool search = false;
};

// One GBNF expression (no rule definitions), to place after `name ::= `.
StatusOr<std::string> RegexToGbnf(std::string_view pattern, const CompileLimits& limits,
                                  const RegexOptions& options = {});

}  // namespace tessera::structured
