#include "server/openai/chat_messages.h"

#include "text/chat_template.h"

#include <array>
#include <string>

namespace tessera::openai {
namespace {

constexpr std::array<std::string_view, 5> kRoles = {"system", "developer", "user", "assistant", "tool"};

// Content as a string: a string, or text parts joined with "\n"; null when
// absent/null and allowed.
std::optional<ApiError> NormalizeContent(const Json& msg, const std::string& role, const std::string& at,
                                         Json* content) {
  auto it = msg.find("content");
  const std::string param = at + ".content";
  if (it == msg.end() || it->is_null()) {
    const bool ok = (role == "assistant" && msg.contains("tool_calls")) || role == "tool";
    if (!ok) return BadRequest("'" + param + "' is required for role '" + role + "'", param);
    *content = nullptr;
    return std::nullopt;
  }
  if (it->is_string()) {
    *content = *it;
    return std::nullopt;
  }
  if (!it->is_array()) return TypeError(param, "a string, an array of content parts or null", *it);
  std::string text;
  for (size_t j = 0; j < it->size(); ++j) {
    const Json& part = (*it)[j];
    const std::string pp = param + "[" + std::to_string(j) + "]";
    if (!part.is_object()) return TypeError(pp, "an object", part);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) {
      return TypeError(pp + ".type", "a string", type == part.end() ? Json() : *type);
    }
    if (*type != "text") {
      return BadRequest("only text content parts are supported: '" + pp + ".type' must be \"text\", got " +
                            type->dump(-1, ' ', false, Json::error_handler_t::replace).substr(0, 64),
                        pp + ".type");
    }
    auto t = part.find("text");
    if (t == part.end() || !t->is_string()) {
      return TypeError(pp + ".text", "a string", t == part.end() ? Json() : *t);
    }
    if (j > 0) text += '\n';
    text += t->get_ref<const std::string&>();
  }
  *content = std::move(text);
  return std::nullopt;
}

std::optional<ApiError> ParseMessage(const Json& msg, size_t i, Json* out) {
  const std::string at = "messages[" + std::to_string(i) + "]";
  if (!msg.is_object()) return TypeError(at, "an object", msg);
  auto role_it = msg.find("role");
  const std::string rp = at + ".role";
  const std::string expect = "one of \"system\", \"developer\", \"user\", \"assistant\", \"tool\"";
  if (role_it == msg.end() || !role_it->is_string()) {
    return TypeError(rp, expect, role_it == msg.end() ? Json() : *role_it);
  }
  const std::string& role = role_it->get_ref<const std::string&>();
  bool known = false;
  for (std::string_view r : kRoles) known = known || r == role;
  if (!known) return TypeError(rp, expect, *role_it);

  Json content;
  if (auto e = NormalizeContent(msg, role, at, &content)) return e;
  Json norm = Json::object();
  norm["role"] = role;
  norm["content"] = std::move(content);
  // Pass-through fields, type-checked.
  for (const char* key : {"name", "tool_call_id"}) {
    auto it = msg.find(key);
    if (it == msg.end() || it->is_null()) continue;
    if (!it->is_string()) return TypeError(at + "." + key, "a string", *it);
    norm[key] = *it;
  }
  if (auto it = msg.find("tool_calls"); it != msg.end() && !it->is_null()) {
    if (!it->is_array()) return TypeError(at + ".tool_calls", "an array", *it);
    norm["tool_calls"] = *it;
  }
  if (auto it = msg.find("reasoning_content"); it != msg.end() && !it->is_null()) {
    if (!it->is_string()) return TypeError(at + ".reasoning_content", "a string", *it);
    norm["reasoning_content"] = *it;
  }
  *out = std::move(norm);
  return std::nullopt;
}

// The shape of a JSON Schema as tools use it: an object whose "type" is a
// JSON type name (or a list of them), "properties" an object of schemas,
// "items" a schema, "required" a list of strings, "enum" a list. Not a full
// validator: it refuses what no schema could mean, so a malformed tool
// definition is a 400 instead of reaching the model silently.
std::optional<ApiError> CheckSchema(const Json& schema, const std::string& at, int depth) {
  if (depth > 32) return BadRequest("'" + at + "' nests schemas deeper than 32 levels", at);
  if (schema.is_boolean()) return std::nullopt;  // true/false schemas
  if (!schema.is_object()) return TypeError(at, "a JSON Schema object", schema);
  static constexpr std::string_view kTypes[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
  auto known_type = [](const Json& t) {
    if (!t.is_string()) return false;
    for (std::string_view k : kTypes) {
      if (t == k) return true;
    }
    return false;
  };
  if (auto t = schema.find("type"); t != schema.end()) {
    bool ok = known_type(*t);
    if (t->is_array() && !t->empty()) {
      ok = true;
      for (const Json& e : *t) ok = ok && known_type(e);
    }
    if (!ok) return TypeError(at + ".type", "a JSON Schema type name or a list of them", *t);
  }
  if (auto p = schema.find("properties"); p != schema.end()) {
    if (!p->is_object()) return TypeError(at + ".properties", "an object of schemas", *p);
    for (auto it = p->begin(); it != p->end(); ++it) {
      if (auto e = CheckSchema(it.value(), at + ".properties." + it.key().substr(0, 64), depth + 1)) return e;
    }
  }
  if (auto r = schema.find("required"); r != schema.end()) {
    bool ok = r->is_array();
    for (const Json& e : ok ? *r : Json::array()) ok = ok && e.is_string();
    if (!ok) return TypeError(at + ".required", "an array of property names", *r);
  }
  if (auto e = schema.find("enum"); e != schema.end() && !e->is_array()) {
    return TypeError(at + ".enum", "an array", *e);
  }
  if (auto i = schema.find("items"); i != schema.end()) {
    if (i->is_array()) {  // tuple form (older drafts)
      for (size_t j = 0; j < i->size(); ++j) {
        if (auto e = CheckSchema((*i)[j], at + ".items[" + std::to_string(j) + "]", depth + 1)) return e;
      }
    } else if (auto e = CheckSchema(*i, at + ".items", depth + 1)) {
      return e;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseMessages(const Json& body, Json* messages) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return BadRequest("'messages' is required", "messages");
  return ParseMessageList(*it, messages);
}

std::optional<ApiError> ParseMessageList(const Json& list, Json* messages) {
  if (!list.is_array() || list.empty()) return TypeError("messages", "a non-empty array of messages", list);
  Json out = Json::array();
  for (size_t i = 0; i < list.size(); ++i) {
    Json m;
    if (auto e = ParseMessage(list[i], i, &m)) return e;
    out.push_back(std::move(m));
  }
  *messages = std::move(out);
  return std::nullopt;
}

std::optional<ApiError> ParseTools(const Json& body, Json* tools) {
  *tools = nullptr;
  auto it = body.find("tools");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_array()) return TypeError("tools", "an array", *it);
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& t = (*it)[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return TypeError(at, "an object", t);
    auto type = t.find("type");
    if (type == t.end() || *type != "function") {
      return TypeError(at + ".type", "\"function\"", type == t.end() ? Json() : *type);
    }
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) {
      return TypeError(at + ".function", "an object", fn == t.end() ? Json() : *fn);
    }
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string()) {
      return TypeError(at + ".function.name", "a string", name == fn->end() ? Json() : *name);
    }
    if (auto params = fn->find("parameters"); params != fn->end() && !params->is_null()) {
      if (auto e = CheckSchema(*params, at + ".function.parameters", 0)) return e;
    }
  }
  if (!it->empty()) *tools = *it;
  return std::nullopt;
}

std::optional<ApiError> ParseTemplateKwargs(const Json& body, Json* kwargs) {
  *kwargs = Json::object();
  auto it = body.find("chat_template_kwargs");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return TypeError("chat_template_kwargs", "an object", *it);
  for (auto kv = it->begin(); kv != it->end(); ++kv) {
    if (text::ChatTemplate::IsReservedVariable(kv.key())) {
      const std::string param = "chat_template_kwargs." + kv.key().substr(0, 64);
      return BadRequest("'" + param + "' is reserved: the server sets it from the request itself", param);
    }
  }
  *kwargs = *it;
  return std::nullopt;
}

std::optional<ApiError> ParseGenerationPromptFlags(const Json& body, bool* add_generation_prompt,
                                                   bool* continue_final_message) {
  *add_generation_prompt = true;
  *continue_final_message = false;
  if (auto e = ReadBool(body, "add_generation_prompt", "add_generation_prompt", add_generation_prompt)) return e;
  if (auto e = ReadBool(body, "continue_final_message", "continue_final_message", continue_final_message)) {
    return e;
  }
  if (*add_generation_prompt && *continue_final_message) {
    return BadRequest("'continue_final_message' and 'add_generation_prompt' cannot both be true",
                      "continue_final_message");
  }
  return std::nullopt;
}

}  // namespace tessera::openai
