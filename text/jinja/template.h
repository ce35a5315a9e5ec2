// Template: the public Status-based API of the Jinja interpreter.
//
//   ASSIGN_OR_RETURN(auto t, jinja::Template::Parse(source));
//   ASSIGN_OR_RETURN(std::string s, t.Render({{"messages", msgs}}));
//
// Parsing validates everything that can be checked statically (syntax, tags,
// filters, tests, globals, methods), so unsupported templates fail at load time
// with "line L, column C: ...". A Template is immutable and cheap to copy (the AST
// is shared); Render is const and safe to call from several threads at once.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "text/jinja/ast.h"
#include "text/jinja/evaluator.h"
#include "text/jinja/lexer.h"
#include "text/jinja/parser.h"
#include "text/jinja/value.h"

namespace tessera::jinja {

struct TemplateOptions {
  LexerOptions lexer;  // defaults are HF's: trim_blocks, lstrip_blocks
  ParseLimits parse;
};

class Template {
 public:
  // Errors: INVALID_ARGUMENT (syntax) or UNIMPLEMENTED (valid Jinja outside our
  // subset), message "line L, column C: ...".
  static StatusOr<Template> Parse(std::string_view source, const TemplateOptions& options = {});

  // Errors: INVALID_ARGUMENT with the exact message for raise_exception(msg);
  // INVALID_ARGUMENT "line L, column C: ..." for type/undefined errors;
  // RESOURCE_EXHAUSTED when a RenderLimits bound is hit.
  StatusOr<std::string> Render(const std::vector<std::pair<std::string, Value>>& variables,
                               const RenderOptions& options = {}) const;

 private:
  explicit Template(std::shared_ptr<const NodeList> nodes) : nodes_(std::move(nodes)) {}
  std::shared_ptr<const NodeList> nodes_;
};

}  // namespace tessera::jinja
