#include "text/chat_template.h"

#include <fstream>
#include <sstream>

namespace tessera::text {
namespace {

using ojson = nlohmann::ordered_json;

// A special token is a string or an AddedToken object {"content": ...}.
bool TokenString(const ojson& v, std::string* out) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    return true;
  }
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    *out = v["content"].get<std::string>();
    return true;
  }
  return false;
}

StatusOr<jinja::Template> ParseOne(const std::string& source, const std::string& where) {
  StatusOr<jinja::Template> t = jinja::Template::Parse(source);
  if (!t.ok()) return Status(t.status().code(), where + ": " + t.status().message());
  return t;
}

}  // namespace

StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  ojson config = ojson::parse(ss.str(), nullptr, false);
  if (config.is_discarded() || !config.is_object()) return InvalidArgument(path + ": not a JSON object");
  return FromTokenizerConfig(config, path);
}

StatusOr<ChatTemplate> ChatTemplate::FromTokenizerConfig(const ojson& config, const std::string& source_name) {
  ChatTemplate ct;
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return NotFound(source_name + ": no chat_template");
  if (it->is_string()) {
    ASSIGN_OR_RETURN(jinja::Template t, ParseOne(it->get<std::string>(), source_name + ": chat_template"));
    ct.templates_.emplace("default", std::move(t));
    ct.sources_.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    for (size_t i = 0; i < it->size(); ++i) {
      const ojson& e = (*it)[i];
      const std::string where = source_name + ": chat_template[" + std::to_string(i) + "]";
      if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("template") ||
          !e["template"].is_string())
        return InvalidArgument(where + " must be {\"name\": string, \"template\": string}");
      ASSIGN_OR_RETURN(jinja::Template t,
                       ParseOne(e["template"].get<std::string>(), where + " (" + e["name"].get<std::string>() + ")"));
      ct.templates_.emplace(e["name"].get<std::string>(), std::move(t));
      ct.sources_.push_back(e["template"].get<std::string>());
    }
    if (ct.templates_.empty()) return InvalidArgument(source_name + ": chat_template is an empty list");
  } else {
    return InvalidArgument(source_name + ": chat_template must be a string or a list of {name, template}");
  }
  // HF's special_tokens_map: only attributes that are set (and non-empty).
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    auto t = config.find(key);
    if (t == config.end() || t->is_null()) continue;
    std::string s;
    if (!TokenString(*t, &s)) return InvalidArgument(source_name + ": " + key + " must be a string or {content}");
    if (s.empty()) continue;
    ct.special_tokens_.emplace_back(key, jinja::Value::String(s));
    if (std::string(key) == "bos_token") ct.bos_token_ = s;
    if (std::string(key) == "eos_token") ct.eos_token_ = s;
  }
  auto extra = config.find("additional_special_tokens");
  if (extra != config.end() && extra->is_array() && !extra->empty()) {
    std::vector<jinja::Value> list;
    for (const auto& t : *extra) {
      std::string s;
      if (!TokenString(t, &s)) return InvalidArgument(source_name + ": additional_special_tokens entries must be tokens");
      list.push_back(jinja::Value::String(s));
    }
    ct.special_tokens_.emplace_back("additional_special_tokens", jinja::Value::List(std::move(list)));
  }
  return ct;
}

bool ChatTemplate::SourceMentions(std::string_view needle) const {
  for (const std::string& s : sources_) {
    if (s.find(needle) != std::string::npos) return true;
  }
  return false;
}

StatusOr<ChatTemplate> ChatTemplate::FromSource(const std::string& source,
                                                const std::map<std::string, std::string>& special_tokens) {
  ojson config = ojson::object();
  config["chat_template"] = source;
  for (const auto& [k, v] : special_tokens) config[k] = v;
  return FromTokenizerConfig(config, "chat template");
}

StatusOr<std::string> ChatTemplate::Render(const ojson& messages, const ojson& tools, bool add_generation_prompt,
                                           const ojson& extra_kwargs, const ChatRenderOptions& options) const {
  if (!messages.is_array()) return InvalidArgument("messages must be a JSON array");
  if (!tools.is_null() && !tools.is_array()) return InvalidArgument("tools must be a JSON array or null");
  if (!extra_kwargs.is_null() && !extra_kwargs.is_object()) return InvalidArgument("template kwargs must be an object");

  const jinja::Template* tmpl = nullptr;
  if (!options.template_name.empty()) {
    auto it = templates_.find(options.template_name);
    if (it == templates_.end()) return NotFound("no chat template named '" + options.template_name + "'");
    tmpl = &it->second;
  } else if (templates_.size() == 1 && templates_.count("default")) {
    tmpl = &templates_.at("default");
  } else if (!tools.is_null() && templates_.count("tool_use")) {
    tmpl = &templates_.at("tool_use");
  } else if (templates_.count("default")) {
    tmpl = &templates_.at("default");
  } else {
    return FailedPrecondition("this model has several chat templates and none is named 'default'; pick one");
  }

  std::vector<std::pair<std::string, jinja::Value>> vars;
  ASSIGN_OR_RETURN(jinja::Value msgs, jinja::FromJson(messages));
  vars.emplace_back("messages", std::move(msgs));
  ASSIGN_OR_RETURN(jinja::Value tool_value, jinja::FromJson(tools));
  vars.emplace_back("tools", std::move(tool_value));
  vars.emplace_back("documents", jinja::Value::None());
  vars.emplace_back("add_generation_prompt", jinja::Value::Bool(add_generation_prompt));
  for (const auto& kv : special_tokens_) vars.push_back(kv);
  if (extra_kwargs.is_object()) {
    for (auto it = extra_kwargs.begin(); it != extra_kwargs.end(); ++it) {
      for (const char* conversation : {"messages", "tools", "documents", "add_generation_prompt"}) {
        if (it.key() == conversation) {
          return InvalidArgument("template kwargs must not set '" + it.key() + "' (it is the request's own)");
        }
      }
      ASSIGN_OR_RETURN(jinja::Value v, jinja::FromJson(it.value()));
      vars.emplace_back(it.key(), std::move(v));  // later entries override earlier ones
    }
  }
  jinja::RenderOptions ro;
  ro.limits = options.limits;
  ro.now_unix_seconds = options.now_unix_seconds;
  return tmpl->Render(vars, ro);
}

bool ChatTemplate::IsReservedVariable(std::string_view name) {
  static constexpr std::string_view kReserved[] = {
      "messages",  "tools",     "documents", "add_generation_prompt",     "bos_token",      "eos_token",
      "unk_token", "sep_token", "pad_token", "cls_token",                 "mask_token",     "additional_special_tokens",
      "raise_exception", "strftime_now", "range", "namespace"};
  for (std::string_view r : kReserved) {
    if (name == r) return true;
  }
  return false;
}

const std::string& ChatTemplate::bos_token() const { return bos_token_; }
const std::string& ChatTemplate::eos_token() const { return eos_token_; }

std::vector<std::string> ChatTemplate::template_names() const {
  std::vector<std::string> out;
  for (const auto& kv : templates_) out.push_back(kv.first);
  return out;
}

}  // namespace tessera::text
