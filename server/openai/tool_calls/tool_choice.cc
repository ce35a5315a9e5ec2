#include "server/openai/tool_calls/tool_choice.h"

namespace tessera::openai::tools {
namespace {

// The tool named `name`, or null.
const Json* FindTool(const Json& tools, const std::string& name) {
  if (!tools.is_array()) return nullptr;
  for (const Json& t : tools) {
    const Json& fn = t.at("function");
    if (fn.at("name") == name) return &t;
  }
  return nullptr;
}

}  // namespace

std::optional<ApiError> ParseToolChoice(const Json& body, const Json& tools, ToolChoice* out) {
  const bool have_tools = tools.is_array() && !tools.empty();
  ToolChoice c;
  c.mode = have_tools ? ToolChoiceMode::kAuto : ToolChoiceMode::kNone;
  auto it = body.find("tool_choice");
  const char* expect = "\"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}";
  if (it == body.end() || it->is_null()) {
    *out = c;
    return std::nullopt;
  }
  if (*it == "none") {
    c.mode = ToolChoiceMode::kNone;
  } else if (*it == "auto") {
    c.mode = ToolChoiceMode::kAuto;
  } else if (*it == "required") {
    c.mode = ToolChoiceMode::kRequired;
  } else if (it->is_object()) {
    auto type = it->find("type");
    auto fn = it->find("function");
    if (type == it->end() || *type != "function" || fn == it->end() || !fn->is_object()) {
      return TypeError("tool_choice", expect, *it);
    }
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string()) {
      return TypeError("tool_choice.function.name", "a string", name == fn->end() ? Json() : *name);
    }
    c.mode = ToolChoiceMode::kNamed;
    c.function_name = name->get<std::string>();
  } else {
    return TypeError("tool_choice", expect, *it);
  }
  if ((c.mode == ToolChoiceMode::kRequired || c.mode == ToolChoiceMode::kNamed) && !have_tools) {
    return BadRequest("'tool_choice' " + std::string(c.mode == ToolChoiceMode::kRequired ? "\"required\"" : "naming a function") +
                          " needs a non-empty 'tools' list",
                      "tool_choice");
  }
  if (c.mode == ToolChoiceMode::kNamed && FindTool(tools, c.function_name) == nullptr) {
    return BadRequest("'tool_choice' names the function '" + c.function_name.substr(0, 64) +
                          "', which is not in 'tools'",
                      "tool_choice");
  }
  *out = std::move(c);
  return std::nullopt;
}

}  // namespace tessera::openai::tools
