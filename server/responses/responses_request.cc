#include "server/responses/responses_request.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <string_view>
#include <utility>

#include "server/openai/chat_messages.h"
#include "server/openai/structured_request.h"
#include "server/openai/tool_calls/chat_output.h"
#include "server/openai/tool_calls/tool_choice.h"

namespace tessera::responses {
namespace {

using ::tessera::BadRequest;
using openai::ReadBool;
using openai::ReadInt;
using openai::ReadNumber;
using openai::ReadString;
using openai::TypeError;

constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr size_t kMaxMetadataKeys = 16;
constexpr size_t kMaxMetadataKeyBytes = 64;
constexpr size_t kMaxMetadataValueBytes = 512;
constexpr size_t kMaxUserBytes = 256;

std::string Index(const std::string& at, size_t i) { return at + "[" + std::to_string(i) + "]"; }

bool Set(const Json& obj, const char* key) {
  auto it = obj.find(key);
  return it != obj.end() && !it->is_null();
}

ApiError Unsupported(const std::string& param, const std::string& why) {
  return BadRequest("'" + param + "': " + why, param, "unsupported_parameter");
}

// A field of `obj` that asks for something this server does not do: a 400
// naming it unless absent, null, or equal to `harmless` (when given).
std::optional<ApiError> RefuseField(const Json& obj, const char* key, const std::string& at, const std::string& why,
                                    const Json& harmless = Json()) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null() || (!harmless.is_null() && *it == harmless)) return std::nullopt;
  return Unsupported(at.empty() ? key : at + "." + key, why);
}

std::optional<ApiError> RequiredString(const Json& obj, const char* key, const std::string& at, std::string* out) {
  const std::string param = at.empty() ? key : at + "." + key;
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return BadRequest("'" + param + "' is required", param);
  if (!it->is_string()) return TypeError(param, "a string", *it);
  *out = it->get<std::string>();
  return std::nullopt;
}

// The text of a content list: a string, or parts of the `allowed` types
// (each {"type", "text"}), joined with "\n" as chat joins text parts.
// Image, file and audio parts are refused naming the part's type.
std::optional<ApiError> ContentText(const Json& content, const std::string& at,
                                    std::initializer_list<std::string_view> allowed, std::string* text, Json* parts) {
  if (content.is_string()) {
    *text = content.get<std::string>();
    return std::nullopt;
  }
  if (!content.is_array()) return TypeError(at, "a string or an array of content parts", content);
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& p = content[j];
    const std::string pp = Index(at, j);
    if (!p.is_object()) return TypeError(pp, "an object", p);
    std::string type;
    if (auto e = RequiredString(p, "type", pp, &type)) return e;
    bool ok = false;
    for (std::string_view a : allowed) ok = ok || type == a;
    if (!ok) {
      const bool media = type == "input_image" || type == "input_file" || type == "input_audio";
      return Unsupported(pp + ".type", media ? type + " parts are not supported (this server serves text-only models)"
                                             : "content parts of type \"" + type.substr(0, 64) +
                                                   "\" are not supported here");
    }
    std::string t;
    if (auto e = RequiredString(p, "text", pp, &t)) return e;
    if (j > 0) *text += '\n';
    *text += t;
    if (parts != nullptr) {
      Json part = {{"type", type}, {"text", std::move(t)}};
      if (type == "output_text") part["annotations"] = Json::array();
      parts->push_back(std::move(part));
    }
  }
  return std::nullopt;
}

// The item's id as given (a string), or a fresh one with `prefix`.
std::optional<ApiError> ItemId(const Json& item, const std::string& at, const char* prefix, Json* out) {
  std::string id;
  if (auto e = ReadString(item, "id", at + ".id", &id)) return e;
  (*out)["id"] = id.empty() ? openai::tools::RandomId(prefix) : id;
  return std::nullopt;
}

// One `input` item into its stored form.
std::optional<ApiError> NormalizeItem(const Json& item, const std::string& at, Json* out) {
  if (!item.is_object()) return TypeError(at, "an object", item);
  std::string type = "message";  // EasyInputMessage has no type
  if (auto e = ReadString(item, "type", at + ".type", &type)) return e;
  if (type == "message") {
    std::string role;
    if (auto e = RequiredString(item, "role", at, &role)) return e;
    if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
      return TypeError(at + ".role", "one of \"user\", \"assistant\", \"system\", \"developer\"", item["role"]);
    }
    auto content = item.find("content");
    if (content == item.end() || content->is_null()) return BadRequest("'" + at + ".content' is required", at + ".content");
    const bool assistant = role == "assistant";
    std::string text;
    Json parts = Json::array();
    if (auto e = ContentText(*content, at + ".content",
                             assistant ? std::initializer_list<std::string_view>{"output_text", "input_text"}
                                       : std::initializer_list<std::string_view>{"input_text"},
                             &text, &parts)) {
      return e;
    }
    if (content->is_string()) {
      Json part = {{"type", assistant ? "output_text" : "input_text"}, {"text", text}};
      if (assistant) part["annotations"] = Json::array();
      parts.push_back(std::move(part));
    }
    *out = {{"type", "message"}};
    if (auto e = ItemId(item, at, "msg_", out)) return e;
    (*out)["role"] = role;
    (*out)["content"] = std::move(parts);
    (*out)["status"] = "completed";
    return std::nullopt;
  }
  if (type == "function_call") {
    std::string call_id, name, arguments;
    if (auto e = RequiredString(item, "call_id", at, &call_id)) return e;
    if (auto e = RequiredString(item, "name", at, &name)) return e;
    if (auto e = RequiredString(item, "arguments", at, &arguments)) return e;
    *out = {{"type", "function_call"}};
    if (auto e = ItemId(item, at, "fc_", out)) return e;
    (*out)["call_id"] = call_id;
    (*out)["name"] = name;
    (*out)["arguments"] = arguments;
    (*out)["status"] = "completed";
    return std::nullopt;
  }
  if (type == "function_call_output") {
    std::string call_id, output;
    if (auto e = RequiredString(item, "call_id", at, &call_id)) return e;
    auto o = item.find("output");
    if (o == item.end() || o->is_null()) return BadRequest("'" + at + ".output' is required", at + ".output");
    if (auto e = ContentText(*o, at + ".output", {"input_text"}, &output, nullptr)) return e;
    *out = {{"type", "function_call_output"}};
    if (auto e = ItemId(item, at, "fco_", out)) return e;
    (*out)["call_id"] = call_id;
    (*out)["output"] = output;
    (*out)["status"] = "completed";
    return std::nullopt;
  }
  if (type == "reasoning") {
    if (auto e = RefuseField(item, "encrypted_content", at,
                             "encrypted reasoning is not supported (this server does not encrypt reasoning); send "
                             "the reasoning as content")) {
      return e;
    }
    std::string text, summary;
    Json content = Json::array(), summaries = Json::array();
    if (Set(item, "content")) {
      if (auto e = ContentText(item["content"], at + ".content", {"reasoning_text"}, &text, &content)) return e;
    }
    if (Set(item, "summary")) {
      if (auto e = ContentText(item["summary"], at + ".summary", {"summary_text"}, &summary, &summaries)) return e;
    }
    *out = {{"type", "reasoning"}};
    if (auto e = ItemId(item, at, "rs_", out)) return e;
    (*out)["summary"] = std::move(summaries);
    (*out)["content"] = std::move(content);
    return std::nullopt;
  }
  return Unsupported(at + ".type", "input items of type \"" + type.substr(0, 64) +
                                       "\" are not supported (message, function_call, function_call_output and "
                                       "reasoning are)");
}

// Runs `f(element, path)` over an array of objects named `at`; the first error ends the walk.
template <typename F>
std::optional<ApiError> EachObject(const Json& list, const std::string& at, std::string_view expect, F&& f) {
  if (!list.is_array()) return TypeError(at, expect, list);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = Index(at, i);
    if (!list[i].is_object()) return TypeError(path, "an object", list[i]);
    if (auto e = f(list[i], path)) return e;
  }
  return std::nullopt;
}

std::optional<ApiError> Input(const Json& body, ResponsesRequest* r) {
  auto it = body.find("input");
  if (it == body.end() || it->is_null()) return BadRequest("'input' is required", "input");
  if (it->is_string()) {
    r->input_items.push_back({{"type", "message"},
                              {"id", openai::tools::RandomId("msg_")},
                              {"role", "user"},
                              {"content", Json::array({{{"type", "input_text"}, {"text", *it}}})},
                              {"status", "completed"}});
    return std::nullopt;
  }
  if (!it->is_array() || it->empty()) return TypeError("input", "a string or a non-empty array of items", *it);
  for (size_t i = 0; i < it->size(); ++i) {
    Json item;
    if (auto e = NormalizeItem((*it)[i], Index("input", i), &item)) return e;
    r->input_items.push_back(std::move(item));
  }
  return std::nullopt;
}

// [{"type":"function","name","description"?,"parameters"?,"strict"?}] ->
// chat's [{"type":"function","function":{...}}], then chat's checks with
// their field names mapped back.
std::optional<ApiError> Tools(const Json& body, ResponsesRequest* r) {
  auto it = body.find("tools");
  if (it == body.end() || it->is_null()) return std::nullopt;
  Json fns = Json::array();
  auto tool = [&fns](const Json& t, const std::string& at) -> std::optional<ApiError> {
    std::string type;
    if (auto e = RequiredString(t, "type", at, &type)) return e;
    if (type != "function") {
      return Unsupported(at + ".type", "built-in tools such as \"" + type.substr(0, 64) +
                                           "\" are not supported; only function tools are");
    }
    std::string name;
    if (auto e = RequiredString(t, "name", at, &name)) return e;
    Json fn = {{"name", name}};
    for (const char* key : {"description", "parameters", "strict"}) {
      if (Set(t, key)) fn[key] = t[key];
    }
    if (fn.contains("description") && !fn["description"].is_string()) {
      return TypeError(at + ".description", "a string", fn["description"]);
    }
    if (fn.contains("strict") && !fn["strict"].is_boolean()) return TypeError(at + ".strict", "a boolean", fn["strict"]);
    fns.push_back({{"type", "function"}, {"function", std::move(fn)}});
    return std::nullopt;
  };
  if (auto e = EachObject(*it, "tools", "an array of tools", tool)) return e;
  if (auto e = openai::ParseTools(Json{{"tools", fns}}, &r->chat.tools)) {
    for (std::string* s : {&e->param, &e->message}) {
      for (size_t p = s->find(".function."); p != std::string::npos; p = s->find(".function.", p)) {
        s->replace(p, 10, ".");
      }
    }
    return e;
  }
  r->echo["tools"] = *it;
  return std::nullopt;
}

// "none" | "auto" | "required" | {"type":"function","name"}; the built-in
// tool choices are refused naming the field.
std::optional<ApiError> ToolChoice(const Json& body, ResponsesRequest* r) {
  auto it = body.find("tool_choice");
  Json chat_choice;  // null: chat's default (auto with tools, else none)
  if (it != body.end() && !it->is_null()) {
    if (it->is_string()) {
      chat_choice = *it;
    } else if (it->is_object()) {
      std::string type;
      if (auto e = RequiredString(*it, "type", "tool_choice", &type)) return e;
      if (type != "function") {
        return Unsupported("tool_choice.type", "tool choices of type \"" + type.substr(0, 64) +
                                                   "\" are not supported (only function tools are)");
      }
      std::string name;
      if (auto e = RequiredString(*it, "name", "tool_choice", &name)) return e;
      chat_choice = {{"type", "function"}, {"function", {{"name", name}}}};
    } else {
      return TypeError("tool_choice", "\"none\", \"auto\", \"required\" or a function choice", *it);
    }
  }
  Json chat_body = Json::object();
  if (!chat_choice.is_null()) chat_body["tool_choice"] = chat_choice;
  if (auto e = openai::tools::ParseToolChoice(chat_body, r->chat.tools, &r->chat.tool_choice)) return e;
  r->echo["tool_choice"] = it != body.end() && !it->is_null() ? *it : Json("auto");
  return std::nullopt;
}

// {"format": {"type":"text"} | {"type":"json_object"} |
//  {"type":"json_schema","name","schema","strict"?,"description"?}}.
std::optional<ApiError> Text(const Json& body, ResponsesRequest* r) {
  Json echo = {{"format", {{"type", "text"}}}};
  auto it = body.find("text");
  if (it != body.end() && !it->is_null()) {
    if (!it->is_object()) return TypeError("text", "an object", *it);
    if (auto e = RefuseField(*it, "verbosity", "text", "output verbosity is not supported", Json("medium"))) return e;
    if (auto f = it->find("format"); f != it->end() && !f->is_null()) {
      if (!f->is_object()) return TypeError("text.format", "an object", *f);
      std::string type;
      if (auto e = RequiredString(*f, "type", "text.format", &type)) return e;
      if (type == "json_schema") {
        std::string name;
        if (auto e = RequiredString(*f, "name", "text.format", &name)) return e;
        auto schema = f->find("schema");
        if (schema == f->end() || !schema->is_object()) {
          return TypeError("text.format.schema", "a JSON Schema object", schema == f->end() ? Json() : *schema);
        }
        if (auto e = openai::AddStructuredOutput(openai::StructuredOutputSpec::Kind::kJsonSchema,
                                                 "text.format.schema", *schema, &r->chat.structured)) {
          return e;
        }
      } else if (type == "json_object") {
        if (auto e = openai::AddStructuredOutput(openai::StructuredOutputSpec::Kind::kJsonObject, "text.format",
                                                 Json(), &r->chat.structured)) {
          return e;
        }
      } else if (type != "text") {
        return TypeError("text.format.type", "one of \"text\", \"json_object\", \"json_schema\"", (*f)["type"]);
      }
      echo["format"] = *f;
    }
  }
  r->echo["text"] = std::move(echo);
  return std::nullopt;
}

// {"effort": "low"|"medium"|"high"} reaches the chat template as
// reasoning_effort (as chat's field does); summaries are not generated.
std::optional<ApiError> Reasoning(const Json& body, ResponsesRequest* r) {
  Json echo = {{"effort", nullptr}, {"summary", nullptr}};
  auto it = body.find("reasoning");
  if (it != body.end() && !it->is_null()) {
    if (!it->is_object()) return TypeError("reasoning", "an object", *it);
    for (const char* key : {"summary", "generate_summary"}) {
      if (auto e = RefuseField(*it, key, "reasoning", "reasoning summaries are not generated by this server")) return e;
    }
    if (Set(*it, "effort")) {
      const Json& effort = (*it)["effort"];
      if (effort != "low" && effort != "medium" && effort != "high") {
        return TypeError("reasoning.effort", "one of \"low\", \"medium\", \"high\"", effort);
      }
      r->chat.template_kwargs["reasoning_effort"] = effort;
      echo["effort"] = effort;
    }
  }
  r->echo["reasoning"] = std::move(echo);
  return std::nullopt;
}

// At most 16 string pairs (keys ≤ 64 bytes, values ≤ 512), as OpenAI bounds them.
std::optional<ApiError> Metadata(const Json& body, ResponsesRequest* r) {
  auto it = body.find("metadata");
  if (it == body.end() || it->is_null()) {
    r->echo["metadata"] = Json::object();
    return std::nullopt;
  }
  bool ok = it->is_object() && it->size() <= kMaxMetadataKeys;
  for (auto kv = ok ? it->begin() : it->end(); ok && kv != it->end(); ++kv) {
    ok = kv.key().size() <= kMaxMetadataKeyBytes && kv->is_string() &&
         kv->get_ref<const std::string&>().size() <= kMaxMetadataValueBytes;
  }
  if (!ok) return TypeError("metadata", "an object of at most 16 string values (keys ≤ 64, values ≤ 512 bytes)", *it);
  r->echo["metadata"] = *it;
  return std::nullopt;
}

// Every top-level field of the API, served or refused below by name.
constexpr std::string_view kKnownFields[] = {
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text", "reasoning",
    "max_output_tokens", "temperature", "top_p", "metadata", "store", "previous_response_id", "user",
    "safety_identifier", "stream", "cache_salt", "background", "include", "conversation", "prompt",
    "max_tool_calls", "top_logprobs", "prompt_cache_key", "prompt_cache_retention", "context_management",
    "stream_options", "truncation", "service_tier"};

// The fields the API defines that ask for what this server does not do, and
// any field it does not define (a 400 naming it, as /v1/messages answers).
std::optional<ApiError> RefuseUnsupported(const Json& body) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (std::find(std::begin(kKnownFields), std::end(kKnownFields), it.key()) != std::end(kKnownFields)) continue;
    const std::string param = it.key().substr(0, 64);
    return BadRequest("'" + param + "': unknown field", param, "unknown_parameter");
  }
  if (auto e = RefuseField(body, "background", "", "background responses are not supported (the response is "
                                                   "generated while the request is open)", Json(false))) {
    return e;
  }
  if (auto it = body.find("include"); it != body.end() && !it->is_null() && !(it->is_array() && it->empty())) {
    return Unsupported("include", "no additional output data is available");
  }
  struct Refusal {
    const char* key;
    const char* why;
  };
  static constexpr Refusal kRefused[] = {
      {"conversation", "conversations are not supported; continue with previous_response_id"},
      {"prompt", "prompt templates are not supported"},
      {"max_tool_calls", "a limit on built-in tool calls is not supported"},
      {"top_logprobs", "log probabilities are not supported on this endpoint"},
      {"prompt_cache_key", "prompt cache keys are not supported"},
      {"context_management", "context management is not supported"},
      {"stream_options", "stream options are not supported"},
  };
  for (const Refusal& f : kRefused) {
    if (auto e = RefuseField(body, f.key, "", f.why)) return e;
  }
  if (auto e = RefuseField(body, "truncation", "", "truncation \"auto\" is not supported (a prompt over the context "
                                                   "is refused)", Json("disabled"))) {
    return e;
  }
  if (auto it = body.find("service_tier"); it != body.end() && !it->is_null() && *it != "auto" && *it != "default") {
    return Unsupported("service_tier", "only \"auto\" and \"default\" are served");
  }
  return std::nullopt;
}

// max_output_tokens, temperature [0, 2], top_p (0, 1], stream, cache_salt.
std::optional<ApiError> Sampling(const Json& body, ResponsesRequest* r) {
  SamplingParams& p = r->chat.params;
  std::optional<int64_t> max_tokens;
  if (auto e = ReadInt(body, "max_output_tokens", "max_output_tokens", 1, kI32Max, &max_tokens)) return e;
  if (max_tokens) p.max_tokens = static_cast<int32_t>(*max_tokens);
  std::optional<double> v;
  if (auto e = ReadNumber(body, "temperature", "temperature", 0, 2, false, &v)) return e;
  if (v) p.temperature = static_cast<float>(*v);
  r->echo["temperature"] = v ? Json(*v) : Json();
  v.reset();
  if (auto e = ReadNumber(body, "top_p", "top_p", 0, 1, true, &v)) return e;
  if (v) p.top_p = static_cast<float>(*v);
  r->echo["top_p"] = v ? Json(*v) : Json();
  r->echo["max_output_tokens"] = max_tokens ? Json(*max_tokens) : Json();
  if (auto e = ReadBool(body, "stream", "stream", &r->chat.stream)) return e;
  if (auto e = openai::ReadPromptCacheRetention(body, &r->chat.retention)) return e;
  if (auto e = ReadString(body, "cache_salt", "cache_salt", &r->chat.cache_salt)) return e;
  if (body.contains("cache_salt")) {
    if (auto e = openai::CheckCacheSalt(r->chat.cache_salt)) return e;
  }
  return std::nullopt;
}

// The assistant message a run of reasoning / message / function_call items builds.
struct PendingAssistant {
  std::string reasoning, content;
  Json calls = Json::array();
  bool open = false;
  void Flush(Json* messages) {
    if (!open) return;
    Json m = {{"role", "assistant"}, {"content", calls.empty() || !content.empty() ? Json(content) : Json()}};
    if (!calls.empty()) m["tool_calls"] = std::move(calls);
    if (!reasoning.empty()) m["reasoning_content"] = std::move(reasoning);
    messages->push_back(std::move(m));
    *this = PendingAssistant();
  }
};

// item[key], or null when absent (items are in stored form; this keeps a
// malformed one from being undefined behaviour).
const Json& Field(const Json& item, const char* key) {
  static const Json kNull;
  auto it = item.find(key);
  return it == item.end() ? kNull : *it;
}

std::string JoinedText(const Json& parts) {
  std::string text;
  for (size_t j = 0; parts.is_array() && j < parts.size(); ++j) {
    if (j > 0) text += '\n';
    const Json& t = Field(parts[j], "text");
    if (t.is_string()) text += t.get_ref<const std::string&>();
  }
  return text;
}

}  // namespace

std::optional<ApiError> ItemsToMessages(const Json& items, const std::string& at, Json* messages) {
  PendingAssistant a;
  for (size_t i = 0; items.is_array() && i < items.size(); ++i) {
    const Json& item = items[i];
    const Json& t = Field(item, "type");
    const Json& r = Field(item, "role");
    const std::string type = t.is_string() ? t.get<std::string>() : "";
    const std::string role = r.is_string() ? r.get<std::string>() : "";
    if (type == "reasoning") {
      // A reasoning item starts the assistant turn it belongs to.
      if (a.open && (!a.content.empty() || !a.calls.empty())) a.Flush(messages);
      a.open = true;
      const Json& content = Field(item, "content");
      a.reasoning += JoinedText(content.empty() ? Field(item, "summary") : content);
    } else if (type == "message" && role == "assistant") {
      a.open = true;
      if (!a.content.empty()) a.content += '\n';
      a.content += JoinedText(Field(item, "content"));
    } else if (type == "function_call") {
      a.open = true;
      a.calls.push_back({{"id", Field(item, "call_id")},
                         {"type", "function"},
                         {"function", {{"name", Field(item, "name")}, {"arguments", Field(item, "arguments")}}}});
    } else if (type == "function_call_output") {
      a.Flush(messages);
      messages->push_back(
          {{"role", "tool"}, {"tool_call_id", Field(item, "call_id")}, {"content", Field(item, "output")}});
    } else if (type == "message" && !role.empty()) {
      a.Flush(messages);
      messages->push_back({{"role", role}, {"content", JoinedText(Field(item, "content"))}});
    } else {
      const std::string param = Index(at, i) + ".type";
      return BadRequest("'" + param + "': an item of type \"" + type.substr(0, 64) + "\" cannot be replayed", param);
    }
  }
  a.Flush(messages);
  return std::nullopt;
}

std::optional<ApiError> BuildChatMessages(const Json& prior_items, ResponsesRequest* request) {
  Json messages = Json::array();
  if (request->instructions) messages.push_back({{"role", "system"}, {"content", *request->instructions}});
  if (auto e = ItemsToMessages(prior_items, "previous_response_id", &messages)) return e;
  if (auto e = ItemsToMessages(request->input_items, "input", &messages)) return e;
  Json normalized;
  if (auto e = openai::ParseMessageList(messages, &normalized)) return e;
  request->chat.messages = std::move(normalized);
  request->chat.add_generation_prompt = true;
  request->chat.continue_final_message = false;
  return std::nullopt;
}

std::optional<ApiError> ParseResponsesRequest(std::string_view body_text, const openai::RequestLimits& limits,
                                              ResponsesRequest* out) {
  Json body;
  if (auto e = openai::ParseBodyObject(body_text, &body)) return e;
  ResponsesRequest r;
  r.chat.template_kwargs = Json::object();
  if (auto e = RefuseUnsupported(body)) return e;
  if (auto e = openai::ParseModel(body, limits, &r.chat.model)) return e;
  if (auto e = Input(body, &r)) return e;
  std::string instructions;
  if (auto e = ReadString(body, "instructions", "instructions", &instructions)) return e;
  if (Set(body, "instructions")) r.instructions = instructions;
  r.echo["instructions"] = r.instructions ? Json(*r.instructions) : Json();
  if (auto e = Tools(body, &r)) return e;
  if (!r.echo.contains("tools")) r.echo["tools"] = Json::array();
  if (auto e = ToolChoice(body, &r)) return e;
  if (auto e = ReadBool(body, "parallel_tool_calls", "parallel_tool_calls", &r.chat.parallel_tool_calls)) return e;
  r.echo["parallel_tool_calls"] = r.chat.parallel_tool_calls;
  if (auto e = Text(body, &r)) return e;
  if (auto e = Reasoning(body, &r)) return e;
  if (auto e = Sampling(body, &r)) return e;
  if (auto e = Metadata(body, &r)) return e;
  if (auto e = ReadBool(body, "store", "store", &r.store)) return e;
  r.echo["store"] = r.store;
  if (auto e = ReadString(body, "previous_response_id", "previous_response_id", &r.previous_response_id)) return e;
  r.echo["previous_response_id"] = r.previous_response_id.empty() ? Json() : Json(r.previous_response_id);
  if (auto e = ReadString(body, "user", "user", &r.user)) return e;
  std::string safety;
  if (auto e = ReadString(body, "safety_identifier", "safety_identifier", &safety)) return e;
  if (r.user.size() > kMaxUserBytes || safety.size() > kMaxUserBytes) {
    const char* param = r.user.size() > kMaxUserBytes ? "user" : "safety_identifier";
    return BadRequest(std::string("'") + param + "' must be at most 256 bytes", param);
  }
  if (!r.user.empty()) r.echo["user"] = r.user;
  if (!safety.empty()) r.echo["safety_identifier"] = safety;
  if (r.user.empty()) r.user = safety;
  r.echo["truncation"] = "disabled";
  *out = std::move(r);
  return std::nullopt;
}

}  // namespace tessera::responses
