#include "server/anthropic/messages_request.h"

#include <cctype>
#include <initializer_list>
#include <limits>
#include <utility>

#include "server/openai/chat_messages.h"
#include "server/openai/tool_calls/tool_choice.h"

namespace tessera::anthropic {
namespace {

using ::tessera::BadRequest;
using openai::ReadBool;
using openai::ReadInt;
using openai::ReadNumber;
using openai::TypeError;

constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr size_t kMaxUserIdBytes = 256;
constexpr size_t kMaxToolNameBytes = 128;
constexpr int kMaxCacheControlMarks = 4;  // Anthropic's limit of cache breakpoints

std::string Join(const std::string& at, std::string_view key) {
  return at.empty() ? std::string(key) : at + "." + std::string(key);
}
std::string Index(const std::string& at, size_t i) { return at + "[" + std::to_string(i) + "]"; }

// Every key of `obj` must be one of `known`: the first other one is a 400
// naming it (Anthropic's API refuses extra fields; so do we, rather than
// ignoring what a client may rely on).
std::optional<ApiError> OnlyKnownKeys(const Json& obj, const std::string& at,
                                      std::initializer_list<std::string_view> known) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool ok = false;
    for (std::string_view k : known) ok = ok || it.key() == k;
    if (!ok) {
      const std::string param = Join(at, it.key().substr(0, 64));
      return BadRequest("'" + param + "': unknown or unsupported field", param);
    }
  }
  return std::nullopt;
}

// A required string field.
std::optional<ApiError> RequiredString(const Json& obj, const char* key, const std::string& at, std::string* out) {
  auto it = obj.find(key);
  const std::string param = Join(at, key);
  if (it == obj.end()) return BadRequest("'" + param + "' is required", param);
  if (!it->is_string()) return TypeError(param, "a string", *it);
  *out = it->get<std::string>();
  return std::nullopt;
}

// The `type` of a block or choice object.
std::optional<ApiError> TypeOf(const Json& obj, const std::string& at, std::string* type) {
  if (!obj.is_object()) return TypeError(at, "an object", obj);
  return RequiredString(obj, "type", at, type);
}

// Runs `f(block, path, type)` over an array of content blocks, each an
// object with a string `type`; the first error ends the walk.
template <typename F>
std::optional<ApiError> EachBlock(const Json& blocks, const std::string& at, F&& f) {
  for (size_t j = 0; j < blocks.size(); ++j) {
    const std::string bp = Index(at, j);
    std::string type;
    if (auto e = TypeOf(blocks[j], bp, &type)) return e;
    if (auto e = f(blocks[j], bp, type)) return e;
  }
  return std::nullopt;
}

class Parser {
 public:
  Parser(const MessagesParseOptions& options, MessagesRequest* out) : options_(options), out_(out) {}

  // {"type":"ephemeral","ttl":"5m"|"1h"} on a block: the prompt up to this
  // block is retained for the TTL (docs/architecture.md, "Retention"); the
  // mark waits in pending_ until its message is known (Resolve). Refused
  // (400 naming it) under --cache-control refuse, and past Anthropic's 4 marks.
  std::optional<ApiError> CacheControl(const Json& block, const std::string& at) {
    auto it = block.find("cache_control");
    if (it == block.end() || it->is_null()) return std::nullopt;
    const std::string param = at + ".cache_control";
    std::string type;
    if (auto e = TypeOf(*it, param, &type)) return e;
    if (type != "ephemeral") return TypeError(param + ".type", "\"ephemeral\"", (*it)["type"]);
    if (auto e = OnlyKnownKeys(*it, param, {"type", "ttl"})) return e;
    constexpr int64_t kMinute = int64_t{60} * 1000000000;
    int64_t ttl = 5 * kMinute;
    if (auto t = it->find("ttl"); t != it->end() && !t->is_null()) {
      if (*t != "5m" && *t != "1h") return TypeError(param + ".ttl", "\"5m\" or \"1h\"", *t);
      if (*t == "1h") ttl = 60 * kMinute;
    }
    if (!options_.accept_cache_control) {
      return BadRequest("'" + param +
                            "': prompt retention is refused by this server (--cache-control refuse); leave the field "
                            "out",
                        param);
    }
    if (++out_->cache_control_markers > kMaxCacheControlMarks) {
      return BadRequest("'" + param + "': at most " + std::to_string(kMaxCacheControlMarks) +
                            " blocks may carry cache_control",
                        param);
    }
    if (out_->chat.retention.field.empty()) out_->chat.retention.field = param;
    pending_.push_back({.messages = -1, .tokens = -1, .ttl_ns = ttl});
    return std::nullopt;
  }

  // The marks made since the last call cover the first `messages` chat
  // messages (0: the tools alone): the Anthropic message (or system, or tool
  // list) that carried them, whole.
  void Resolve(int64_t messages) {
    for (openai::RetentionMark& m : pending_) {
      m.messages = messages;
      out_->chat.retention.marks.push_back(m);
    }
    pending_.clear();
  }

  // A text block {"type":"text","text","cache_control"?}; its text appended to *text.
  std::optional<ApiError> TextBlock(const Json& block, const std::string& at, std::string* text) {
    if (auto e = OnlyKnownKeys(block, at, {"type", "text", "cache_control"})) return e;
    if (auto e = CacheControl(block, at)) return e;
    std::string t;
    if (auto e = RequiredString(block, "text", at, &t)) return e;
    if (!text->empty()) *text += '\n';
    *text += t;
    return std::nullopt;
  }

  // A string, or an array of text blocks joined with "\n" (system, tool_result content).
  std::optional<ApiError> TextOrTextBlocks(const Json& v, const std::string& at, std::string* text) {
    if (v.is_string()) {
      *text = v.get<std::string>();
      return std::nullopt;
    }
    if (!v.is_array()) return TypeError(at, "a string or an array of text blocks", v);
    return EachBlock(v, at, [&](const Json& b, const std::string& bp, const std::string& type) {
      return type == "text" ? TextBlock(b, bp, text) : Unsupported(type, bp);
    });
  }

  // A block type this server does not read: 400 naming the block's type.
  static ApiError Unsupported(const std::string& type, const std::string& at) {
    const std::string param = at + ".type";
    if (type == "image" || type == "document") {
      return BadRequest("'" + param + "': " + type + " blocks are not supported (this server serves text-only models)",
                        param);
    }
    return BadRequest("'" + param + "': content blocks of type \"" + type.substr(0, 64) +
                          "\" are not supported here",
                      param);
  }

  std::optional<ApiError> System(const Json& body, Json* messages) {
    auto it = body.find("system");
    if (it == body.end() || it->is_null()) return std::nullopt;
    std::string text;
    if (auto e = TextOrTextBlocks(*it, "system", &text)) return e;
    messages->push_back({{"role", "system"}, {"content", std::move(text)}});
    return std::nullopt;
  }

  // One user turn: text blocks become a user message, tool_result blocks
  // tool messages, in block order (adjacent text blocks join).
  std::optional<ApiError> UserBlocks(const Json& blocks, const std::string& at, Json* messages) {
    std::string text;
    bool has_text = false;
    auto flush = [&] {
      if (has_text) messages->push_back({{"role", "user"}, {"content", std::move(text)}});
      text.clear();
      has_text = false;
    };
    auto block = [&](const Json& b, const std::string& bp, const std::string& type) -> std::optional<ApiError> {
      if (type == "text") {
        std::string t;
        if (auto e = TextBlock(b, bp, &t)) return e;
        if (has_text) text += '\n';
        text += t;
        has_text = true;
      } else if (type == "tool_result") {
        flush();
        if (auto e = OnlyKnownKeys(b, bp, {"type", "tool_use_id", "content", "is_error", "cache_control"})) return e;
        if (auto e = CacheControl(b, bp)) return e;
        std::string id, content;
        if (auto e = RequiredString(b, "tool_use_id", bp, &id)) return e;
        if (auto c = b.find("content"); c != b.end() && !c->is_null()) {
          if (auto e = TextOrTextBlocks(*c, bp + ".content", &content)) return e;
        }
        bool is_error = false;
        if (auto e = ReadBool(b, "is_error", bp + ".is_error", &is_error)) return e;
        // The model is told, in the result itself (chat templates have no error flag).
        if (is_error) content = "Error: " + content;
        messages->push_back({{"role", "tool"}, {"content", std::move(content)}, {"tool_call_id", std::move(id)}});
      } else {
        return Unsupported(type, bp);
      }
      return std::nullopt;
    };
    if (auto e = EachBlock(blocks, at, block)) return e;
    flush();
    return std::nullopt;
  }

  // One assistant turn: thinking -> reasoning_content, text -> content,
  // tool_use -> tool_calls (arguments as JSON text, OpenAI's normal form).
  std::optional<ApiError> AssistantBlocks(const Json& blocks, const std::string& at, Json* messages) {
    std::string text, reasoning;
    Json calls = Json::array();
    auto block = [&](const Json& b, const std::string& bp, const std::string& type) -> std::optional<ApiError> {
      if (type == "text") {
        if (auto e = TextBlock(b, bp, &text)) return e;
      } else if (type == "thinking") {
        if (auto e = OnlyKnownKeys(b, bp, {"type", "thinking", "signature", "cache_control"})) return e;
        if (auto e = CacheControl(b, bp)) return e;
        std::string t, signature;
        if (auto e = RequiredString(b, "thinking", bp, &t)) return e;
        if (auto e = openai::ReadString(b, "signature", bp + ".signature", &signature)) return e;
        reasoning += t;
      } else if (type == "tool_use") {
        if (auto e = OnlyKnownKeys(b, bp, {"type", "id", "name", "input", "cache_control"})) return e;
        if (auto e = CacheControl(b, bp)) return e;
        std::string id, name;
        if (auto e = RequiredString(b, "id", bp, &id)) return e;
        if (auto e = RequiredString(b, "name", bp, &name)) return e;
        auto input = b.find("input");
        if (input == b.end() || !input->is_object()) {
          return TypeError(bp + ".input", "an object", input == b.end() ? Json() : *input);
        }
        calls.push_back({{"id", std::move(id)},
                         {"type", "function"},
                         {"function", {{"name", std::move(name)}, {"arguments", input->dump()}}}});
      } else {
        return Unsupported(type, bp);
      }
      return std::nullopt;
    };
    if (auto e = EachBlock(blocks, at, block)) return e;
    Json m = {{"role", "assistant"}, {"content", calls.empty() || !text.empty() ? Json(text) : Json()}};
    if (!calls.empty()) m["tool_calls"] = std::move(calls);
    if (!reasoning.empty()) m["reasoning_content"] = std::move(reasoning);
    messages->push_back(std::move(m));
    return std::nullopt;
  }

  std::optional<ApiError> Messages(const Json& body, Json* messages, bool* ends_with_assistant) {
    auto it = body.find("messages");
    if (it == body.end()) return BadRequest("'messages' is required", "messages");
    if (!it->is_array() || it->empty()) return TypeError("messages", "a non-empty array of messages", *it);
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& m = (*it)[i];
      const std::string at = Index("messages", i);
      if (!m.is_object()) return TypeError(at, "an object", m);
      if (auto e = OnlyKnownKeys(m, at, {"role", "content"})) return e;
      std::string role;
      if (auto e = RequiredString(m, "role", at, &role)) return e;
      if (role != "user" && role != "assistant") return TypeError(at + ".role", "\"user\" or \"assistant\"", m["role"]);
      auto content = m.find("content");
      const std::string cp = at + ".content";
      if (content == m.end()) return BadRequest("'" + cp + "' is required", cp);
      *ends_with_assistant = role == "assistant";
      if (content->is_string()) {
        messages->push_back({{"role", role}, {"content", *content}});
        continue;
      }
      if (!content->is_array()) return TypeError(cp, "a string or an array of content blocks", *content);
      if (auto e = role == "user" ? UserBlocks(*content, cp, messages) : AssistantBlocks(*content, cp, messages)) {
        return e;
      }
      Resolve(static_cast<int64_t>(messages->size()));
    }
    return std::nullopt;
  }

  // Anthropic tools -> OpenAI function tools, then the OpenAI checks (the
  // schema's shape) with their field names mapped back.
  std::optional<ApiError> Tools(const Json& body, Json* tools) {
    auto it = body.find("tools");
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_array()) return TypeError("tools", "an array of tools", *it);
    Json fns = Json::array();
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& t = (*it)[i];
      const std::string at = Index("tools", i);
      if (!t.is_object()) return TypeError(at, "an object", t);
      if (auto type = t.find("type"); type != t.end() && !type->is_null() && *type != "custom") {
        return BadRequest("'" + at + ".type': only client tools (\"custom\", or no type) are supported; server "
                              "tools such as " + type->dump(-1, ' ', false, Json::error_handler_t::replace).substr(0, 64) +
                              " are not",
                          at + ".type");
      }
      if (auto e = OnlyKnownKeys(t, at, {"type", "name", "description", "input_schema", "cache_control"})) return e;
      if (auto e = CacheControl(t, at)) return e;
      std::string name, description;
      if (auto e = RequiredString(t, "name", at, &name)) return e;
      bool name_ok = !name.empty() && name.size() <= kMaxToolNameBytes;
      for (char c : name) name_ok = name_ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
      if (!name_ok) return TypeError(at + ".name", "1 to 128 characters of [a-zA-Z0-9_-]", t["name"]);
      if (auto e = openai::ReadString(t, "description", at + ".description", &description)) return e;
      auto schema = t.find("input_schema");
      if (schema == t.end() || !schema->is_object()) {
        return TypeError(at + ".input_schema", "a JSON Schema object", schema == t.end() ? Json() : *schema);
      }
      if (auto st = schema->find("type"); st == schema->end() || *st != "object") {
        return TypeError(at + ".input_schema.type", "\"object\"", st == schema->end() ? Json() : *st);
      }
      Json fn = {{"name", name}, {"parameters", *schema}};
      if (!description.empty()) fn["description"] = description;
      fns.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    if (auto e = openai::ParseTools(Json{{"tools", std::move(fns)}}, tools)) return RenameToolField(*e);
    return std::nullopt;
  }

  // "tools[i].function.parameters..." -> "tools[i].input_schema...".
  static ApiError RenameToolField(ApiError e) {
    for (std::string* s : {&e.param, &e.message}) {
      const std::string from = ".function.parameters";
      for (size_t p = s->find(from); p != std::string::npos; p = s->find(from, p)) {
        s->replace(p, from.size(), ".input_schema");
      }
    }
    return e;
  }

  // {"type":"auto"|"any"|"tool"|"none","name"?,"disable_parallel_tool_use"?}.
  std::optional<ApiError> ToolChoice(const Json& body, const Json& tools) {
    openai::ChatRequest& chat = out_->chat;
    chat.tool_choice.mode = tools.is_null() ? openai::tools::ToolChoiceMode::kNone : openai::tools::ToolChoiceMode::kAuto;
    auto it = body.find("tool_choice");
    if (it == body.end() || it->is_null()) return std::nullopt;
    std::string type;
    if (auto e = TypeOf(*it, "tool_choice", &type)) return e;
    if (type == "tool") {
      if (auto e = OnlyKnownKeys(*it, "tool_choice", {"type", "name", "disable_parallel_tool_use"})) return e;
    } else if (auto e = OnlyKnownKeys(*it, "tool_choice", {"type", "disable_parallel_tool_use"})) {
      return e;
    }
    bool disable_parallel = false;
    if (auto e = ReadBool(*it, "disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use",
                          &disable_parallel)) {
      return e;
    }
    chat.parallel_tool_calls = !disable_parallel;
    if (type == "none") {
      chat.tool_choice.mode = openai::tools::ToolChoiceMode::kNone;
      return std::nullopt;
    }
    if (type != "auto" && type != "any" && type != "tool") {
      return TypeError("tool_choice.type", "one of \"auto\", \"any\", \"tool\", \"none\"", (*it)["type"]);
    }
    if (type == "auto") return std::nullopt;
    if (tools.is_null()) return BadRequest("'tool_choice': type \"" + type + "\" needs 'tools'", "tool_choice");
    if (type == "any") {
      chat.tool_choice.mode = openai::tools::ToolChoiceMode::kRequired;
      return std::nullopt;
    }
    std::string name;
    if (auto e = RequiredString(*it, "name", "tool_choice", &name)) return e;
    bool known = false;
    for (const Json& t : tools) known = known || t["function"]["name"] == name;
    if (!known) return BadRequest("'tool_choice.name': no tool named \"" + name.substr(0, 128) + "\"", "tool_choice.name");
    chat.tool_choice = {openai::tools::ToolChoiceMode::kNamed, name};
    return std::nullopt;
  }

  // {"type":"enabled","budget_tokens"} | {"type":"disabled"}: the chat
  // template's enable_thinking (Qwen3's switch; other templates ignore it).
  std::optional<ApiError> Thinking(const Json& body) {
    auto it = body.find("thinking");
    if (it == body.end() || it->is_null()) return std::nullopt;
    std::string type;
    if (auto e = TypeOf(*it, "thinking", &type)) return e;
    if (type == "disabled") {
      if (auto e = OnlyKnownKeys(*it, "thinking", {"type"})) return e;
      out_->thinking = MessagesRequest::Thinking::kDisabled;
    } else if (type == "enabled") {
      if (auto e = OnlyKnownKeys(*it, "thinking", {"type", "budget_tokens"})) return e;
      std::optional<int64_t> budget;
      if (auto e = ReadInt(*it, "budget_tokens", "thinking.budget_tokens", 1024, kI32Max, &budget)) return e;
      if (!budget) return BadRequest("'thinking.budget_tokens' is required", "thinking.budget_tokens");
      const std::optional<int32_t>& max_tokens = out_->chat.params.max_tokens;
      if (max_tokens && *budget >= *max_tokens) {
        return BadRequest("'thinking.budget_tokens' must be less than 'max_tokens'", "thinking.budget_tokens");
      }
      out_->thinking = MessagesRequest::Thinking::kEnabled;
      out_->thinking_budget_tokens = *budget;
    } else {
      return TypeError("thinking.type", "\"enabled\" or \"disabled\"", (*it)["type"]);
    }
    out_->chat.template_kwargs["enable_thinking"] = out_->thinking == MessagesRequest::Thinking::kEnabled;
    return std::nullopt;
  }

  // max_tokens (required), temperature [0, 1], top_p, top_k, stop_sequences, stream.
  std::optional<ApiError> Sampling(const Json& body, const openai::RequestLimits& limits) {
    SamplingParams& p = out_->chat.params;
    std::optional<int64_t> max_tokens;
    if (auto e = ReadInt(body, "max_tokens", "max_tokens", 1, kI32Max, &max_tokens)) return e;
    if (!max_tokens) return BadRequest("'max_tokens' is required", "max_tokens");
    p.max_tokens = static_cast<int32_t>(*max_tokens);
    std::optional<double> v;
    if (auto e = ReadNumber(body, "temperature", "temperature", 0, 1, false, &v)) return e;
    if (v) p.temperature = static_cast<float>(*v);
    v.reset();
    if (auto e = ReadNumber(body, "top_p", "top_p", 0, 1, true, &v)) return e;
    if (v) p.top_p = static_cast<float>(*v);
    std::optional<int64_t> top_k;
    const int64_t vocab = limits.model.vocab_size > 0 ? limits.model.vocab_size : kI32Max;
    if (auto e = ReadInt(body, "top_k", "top_k", 1, vocab, &top_k)) return e;
    if (top_k) p.top_k = static_cast<int32_t>(*top_k);
    if (auto it = body.find("stop_sequences"); it != body.end() && !it->is_null()) {
      std::vector<std::string> stop;
      bool ok = it->is_array() && it->size() <= static_cast<size_t>(openai::kMaxStopStrings);
      for (const Json& s : ok ? *it : Json::array()) {
        ok = ok && s.is_string() && !s.get_ref<const std::string&>().empty();
        if (ok) stop.push_back(s.get<std::string>());
      }
      if (!ok || !openai::StopFits(stop)) {
        return TypeError("stop_sequences", "an array of at most 16 non-empty strings of at most 1024 bytes", *it);
      }
      p.stop = std::move(stop);
    }
    return ReadBool(body, "stream", "stream", &out_->chat.stream);
  }

  std::optional<ApiError> Metadata(const Json& body) {
    auto it = body.find("metadata");
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_object()) return TypeError("metadata", "an object", *it);
    if (auto e = OnlyKnownKeys(*it, "metadata", {"user_id"})) return e;
    if (auto e = openai::ReadString(*it, "user_id", "metadata.user_id", &out_->user_id)) return e;
    if (out_->user_id.size() > kMaxUserIdBytes) {
      return BadRequest("'metadata.user_id' must be at most 256 bytes", "metadata.user_id");
    }
    return std::nullopt;
  }

 private:
  const MessagesParseOptions& options_;
  MessagesRequest* out_;
  std::vector<openai::RetentionMark> pending_;  // cache_control marks of the message being parsed
};

}  // namespace

std::optional<ApiError> ParseMessagesRequest(std::string_view body_text, const openai::RequestLimits& limits,
                                             const MessagesParseOptions& options, MessagesRequest* out) {
  Json body;
  if (auto e = openai::ParseBodyObject(body_text, &body)) return e;
  if (options.count_tokens) {
    if (auto e = OnlyKnownKeys(body, "", {"model", "messages", "system", "tools", "tool_choice", "thinking"})) {
      return e;
    }
  } else if (auto e = OnlyKnownKeys(body, "", {"model", "messages", "max_tokens", "system", "stop_sequences",
                                                "temperature", "top_p", "top_k", "stream", "metadata", "tools",
                                                "tool_choice", "thinking", "cache_salt"})) {
    return e;
  }
  MessagesRequest r;
  Parser p(options, &r);
  openai::ChatRequest& chat = r.chat;
  if (!body.contains("model")) return BadRequest("'model' is required", "model");
  if (auto e = openai::ParseModel(body, limits, &chat.model)) return e;
  if (!options.count_tokens) {
    if (auto e = p.Sampling(body, limits)) return e;
    if (auto e = p.Metadata(body)) return e;
    if (auto e = openai::ReadString(body, "cache_salt", "cache_salt", &chat.cache_salt)) return e;
    if (body.contains("cache_salt")) {
      if (auto e = openai::CheckCacheSalt(chat.cache_salt)) return e;
    }
  }
  Json messages = Json::array();
  bool ends_with_assistant = false;
  if (auto e = p.System(body, &messages)) return e;
  p.Resolve(static_cast<int64_t>(messages.size()));
  if (auto e = p.Messages(body, &messages, &ends_with_assistant)) return e;
  chat.messages = std::move(messages);
  // A final assistant message is Anthropic's prefill: the answer continues it
  // (and, as there, does not repeat it).
  chat.continue_final_message = ends_with_assistant;
  chat.add_generation_prompt = !ends_with_assistant;
  if (auto e = p.Tools(body, &chat.tools)) return e;
  p.Resolve(0);
  if (auto e = p.ToolChoice(body, chat.tools)) return e;
  chat.template_kwargs = Json::object();
  if (auto e = p.Thinking(body)) return e;
  *out = std::move(r);
  return std::nullopt;
}

}  // namespace tessera::anthropic
