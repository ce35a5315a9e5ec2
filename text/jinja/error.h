// Internal error type of the Jinja interpreter. The lexer, parser and evaluator
// throw TemplateError; the public API (template.h) catches it and returns Status,
// so no exception ever leaves tessera::jinja.
#pragma once

#include <string>

namespace tessera::jinja {

struct TemplateError {
  enum class Kind {
    kSyntax,       // malformed template (load time)
    kUnsupported,  // valid Jinja we do not implement (load time)
    kRaised,       // raise_exception(msg) from the template
    kRuntime,      // type/undefined errors while rendering
    kLimit,        // a resource limit (output size, loop iterations, depth)
  };
  Kind kind;
  std::string message;
  int line = 0;    // 1-based; 0 when unknown
  int column = 0;  // 1-based, in code points
};

[[noreturn]] inline void Fail(TemplateError::Kind kind, std::string message, int line = 0,
                              int column = 0) {
  throw TemplateError{kind, std::move(message), line, column};
}

}  // namespace tessera::jinja
