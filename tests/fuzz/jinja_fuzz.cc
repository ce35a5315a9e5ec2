// libFuzzer target: parse arbitrary bytes as a Jinja chat template and render it
// against a fixed conversation. Render limits bound work, output size and
// recursion so no input can hang, exhaust memory or overflow the stack; any
// crash, sanitizer report or uncaught exception is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "text/chat_template.h"
#include "text/jinja/template.h"

namespace {

const nlohmann::ordered_json& Messages() {
  static const nlohmann::ordered_json m = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi \u00e9 \ud83d\ude42 <|im_start|>"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "f", "arguments": {"a": [1, 2.5, null, true]}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "42"},
    {"role": "user", "content": [{"type": "text", "text": "parts"}, {"type": "image"}]}
  ])");
  return m;
}

const nlohmann::ordered_json& Tools() {
  static const nlohmann::ordered_json t = nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "f", "description": "d",
      "parameters": {"type": "object", "properties": {"a": {"type": "array"}}, "required": ["a"]}}}
  ])");
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 64 * 1024) return 0;
  std::string source(reinterpret_cast<const char*>(data), size);
  tessera::StatusOr<tessera::text::ChatTemplate> ct =
      tessera::text::ChatTemplate::FromSource(source, {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  if (!ct.ok()) return 0;
  tessera::text::ChatRenderOptions opts;
  opts.now_unix_seconds = 0;
  opts.limits.max_work = 200000;
  opts.limits.max_output_bytes = 1 << 20;
  (void)ct->Render(Messages(), Tools(), true, nlohmann::ordered_json::object(), opts);
  (void)ct->Render(Messages(), nullptr, false, nlohmann::ordered_json::object(), opts);
  return 0;
}
