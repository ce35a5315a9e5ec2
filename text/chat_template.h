// ChatTemplate: renders a conversation to prompt text with the model's HF chat
// template (tokenizer_config.json "chat_template"), exactly as transformers'
// apply_chat_template(tokenize=False) does with jinja2.
//
// Loading parses and validates the template(s); unsupported syntax fails here,
// with the template's line and column. A ChatTemplate is immutable after
// loading; Render is const and thread-safe (front-end threads share one).
// Render cost is linear in the template work and the conversation size.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "text/jinja/template.h"

namespace tessera::text {

struct ChatRenderOptions {
  jinja::RenderLimits limits;
  // Clock for strftime_now() (UTC); < 0 uses the system clock.
  int64_t now_unix_seconds = -1;
  // For configs with several named templates: which one ("" = HF's choice:
  // "tool_use" when tools are given and it exists, else "default").
  std::string template_name;
};

class ChatTemplate {
 public:
  // Reads tokenizer_config.json. NOT_FOUND if it has no chat_template.
  static StatusOr<ChatTemplate> FromTokenizerConfigFile(const std::string& path);
  // `config` is the parsed tokenizer_config.json; `source_name` prefixes errors.
  static StatusOr<ChatTemplate> FromTokenizerConfig(const nlohmann::ordered_json& config,
                                                    const std::string& source_name);
  // One template source; `special_tokens` maps e.g. "bos_token" to a string.
  static StatusOr<ChatTemplate> FromSource(const std::string& source,
                                           const std::map<std::string, std::string>& special_tokens = {});

  // messages: JSON array of {role, content, ...}; tools: JSON array or null;
  // extra_kwargs: JSON object of further template variables (e.g.
  // enable_thinking), overriding the special tokens; INVALID_ARGUMENT if it
  // names messages, tools, documents or add_generation_prompt.
  StatusOr<std::string> Render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                               bool add_generation_prompt,
                               const nlohmann::ordered_json& extra_kwargs = nlohmann::ordered_json::object(),
                               const ChatRenderOptions& options = {}) const;

  // Whether `name` is a variable or function the server itself gives the
  // template (messages, tools, documents, add_generation_prompt, the special
  // tokens, raise_exception, strftime_now, ...). Client-supplied template
  // kwargs must not use these names: they would replace the validated request.
  static bool IsReservedVariable(std::string_view name);

  // Whether any of the template sources contains `needle` verbatim (e.g.
  // "<tool_call>": how the server guesses the model's tool-call format).
  bool SourceMentions(std::string_view needle) const;
  // Every template's source text (receipts digest them).
  const std::vector<std::string>& sources() const { return sources_; }

  const std::string& bos_token() const;
  const std::string& eos_token() const;
  std::vector<std::string> template_names() const;

 private:
  // Named templates; a single-string chat_template is stored as "default".
  std::map<std::string, jinja::Template> templates_;
  std::vector<std::string> sources_;  // the templates' source text, for SourceMentions
  // Special tokens as HF's special_tokens_map passes them to the template.
  std::vector<std::pair<std::string, jinja::Value>> special_tokens_;
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace tessera::text
