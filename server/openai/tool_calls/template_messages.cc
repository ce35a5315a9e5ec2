#include "server/openai/tool_calls/template_messages.h"

#include "server/openai/json_body.h"
#include "text/chat_template.h"

namespace tessera::openai::tools {

Json MessagesForTemplate(const Json& messages, const text::ChatTemplate& t) {
  const bool keep_null_content = t.SourceMentions("content'] is none") || t.SourceMentions("content is none");
  const bool keep_text_arguments = t.SourceMentions("['arguments'] +") || t.SourceMentions(".arguments +");
  const bool reads_thinking = t.SourceMentions("message.thinking") || t.SourceMentions("message['thinking']");
  Json out = messages;
  if (!out.is_array()) return out;
  for (Json& m : out) {
    if (!m.is_object()) continue;
    if (auto c = m.find("content"); c != m.end() && c->is_null() && !keep_null_content) *c = "";
    if (auto r = m.find("reasoning_content"); reads_thinking && r != m.end() && !m.contains("thinking")) {
      m["thinking"] = *r;  // gpt-oss's template reads past reasoning as `thinking` (as llama.cpp passes it)
    }
    auto calls = m.find("tool_calls");
    if (keep_text_arguments || calls == m.end() || !calls->is_array()) continue;
    for (Json& call : *calls) {
      if (!call.is_object()) continue;
      auto fn = call.find("function");
      if (fn == call.end() || !fn->is_object()) continue;
      auto args = fn->find("arguments");
      if (args == fn->end() || !args->is_string()) continue;
      Json parsed;  // text that is not a JSON object stays as it was
      if (!ParseJsonBounded(args->get_ref<const std::string&>(), JsonLimits{.max_depth = 32}, &parsed) &&
          parsed.is_object()) {
        *args = std::move(parsed);
      }
    }
  }
  return out;
}

}  // namespace tessera::openai::tools
