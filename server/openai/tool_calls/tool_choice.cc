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

Json ParametersOf(const Json& tool) {
  const Json& fn = tool.at("function");
  auto p = fn.find("parameters");
  if (p == fn.end() || p->is_null()) return Json{{"type", "object"}};
  return *p;
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

Json ToolCallOutputSchema(const Json& tools, const ToolChoice& choice, bool parallel_tool_calls) {
  if (choice.mode == ToolChoiceMode::kNamed) {
    const Json* tool = FindTool(tools, choice.function_name);
    return tool ? ParametersOf(*tool) : Json();
  }
  if (choice.mode != ToolChoiceMode::kRequired || !tools.is_array() || tools.empty()) return Json();
  Json branches = Json::array();
  for (const Json& t : tools) {
    branches.push_back({{"type", "object"},
                        {"properties",
                         {{"name", {{"type", "string"}, {"enum", Json::array({t.at("function").at("name")})}}},
                          {"parameters", ParametersOf(t)}}},
                        {"required", Json::array({"name", "parameters"})},
                        {"additionalProperties", false}});
  }
  Json schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", std::move(branches)}}}};
  if (!parallel_tool_calls) schema["maxItems"] = 1;
  return schema;
}

}  // namespace tessera::openai::tools
