#include "server/openai/chat_messages.h"

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

}  // namespace

std::optional<ApiError> ParseMessages(const Json& body, Json* messages) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return BadRequest("'messages' is required", "messages");
  if (!it->is_array() || it->empty()) return TypeError("messages", "a non-empty array of messages", *it);
  Json out = Json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    Json m;
    if (auto e = ParseMessage((*it)[i], i, &m)) return e;
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
  }
  if (!it->empty()) *tools = *it;
  return std::nullopt;
}

std::optional<ApiError> ParseTemplateKwargs(const Json& body, Json* kwargs) {
  *kwargs = Json::object();
  auto it = body.find("chat_template_kwargs");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return TypeError("chat_template_kwargs", "an object", *it);
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
