// Python semantics of Jinja's unary and binary operators (+ - * / // % ** ~,
// comparisons, in / not in). Pure functions; throw TemplateError (kRuntime) on
// type errors, undefined operands, overflow or division by zero.
#pragma once

#include <cstdint>
#include <string>

#include "text/jinja/value.h"

namespace tessera::jinja {

Value UnaryOp(const std::string& op, const Value& v);
// `max_bytes` bounds strings/lists built by repetition or concatenation.
Value BinaryOp(const std::string& op, const Value& a, const Value& b, int64_t max_bytes);
// Python's a < b for the types templates use; throws for unorderable types.
bool PyLess(const Value& a, const Value& b);
// `needle in haystack`.
bool Contains(const Value& haystack, const Value& needle);

// Throws UndefinedError for an undefined operand.
void RequireDefined(const Value& v);

}  // namespace tessera::jinja
