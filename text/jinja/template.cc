#include "text/jinja/template.h"

#include "text/jinja/error.h"

namespace tessera::jinja {
namespace {

std::string WithPosition(const TemplateError& e) {
  if (e.line <= 0) return e.message;
  return "line " + std::to_string(e.line) + ", column " + std::to_string(e.column) + ": " + e.message;
}

}  // namespace

StatusOr<Template> Template::Parse(std::string_view source, const TemplateOptions& options) {
  try {
    auto nodes = std::make_shared<NodeList>(jinja::Parse(source, options.lexer, options.parse));
    return Template(std::move(nodes));
  } catch (const TemplateError& e) {
    if (e.kind == TemplateError::Kind::kUnsupported) return Unimplemented(WithPosition(e));
    return InvalidArgument(WithPosition(e));
  } catch (const std::exception& e) {
    return Internal(std::string("template parse failed: ") + e.what());
  }
}

StatusOr<std::string> Template::Render(const std::vector<std::pair<std::string, Value>>& variables,
                                       const RenderOptions& options) const {
  try {
    return RenderNodes(*nodes_, variables, options);
  } catch (const TemplateError& e) {
    switch (e.kind) {
      case TemplateError::Kind::kRaised: return InvalidArgument(e.message);
      case TemplateError::Kind::kLimit: return ResourceExhausted(WithPosition(e));
      default: return InvalidArgument(WithPosition(e));
    }
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory while rendering template");
  } catch (const std::exception& e) {
    return Internal(std::string("template render failed: ") + e.what());
  }
}

}  // namespace tessera::jinja
