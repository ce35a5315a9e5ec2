// Tool-call turns as the model's chat template expects them. OpenAI clients
// send an assistant tool-call turn with `content: null` and
// `function.arguments` as JSON text; most HF templates expect text content
// (Qwen3's tests `'</think>' in message.content`) and arguments as an object
// (Llama 3.1 and Mistral: `arguments | tojson`) — what vLLM passes them.
// Templates written for the other convention keep it: one that tests
// `content is none` (DeepSeek-V3) gets null, one that joins the arguments as
// text (DeepSeek-V3: `+ tool['function']['arguments'] +`) gets the text.
// A template that reads `message.thinking` (gpt-oss) also gets an assistant
// turn's `reasoning_content` under that name.
// Pure; thread-safe; cost linear in the conversation.
#pragma once

#include "server/openai/request_common.h"

namespace tessera::text {
class ChatTemplate;
}

namespace tessera::openai::tools {

// `messages` as ParseMessages normalized them; returns the copy to render.
Json MessagesForTemplate(const Json& messages, const text::ChatTemplate& chat_template);

}  // namespace tessera::openai::tools
