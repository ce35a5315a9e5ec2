#include "server/serving/input_processor.h"

#include <utility>

#include "server/serving/serving_engine.h"
#include "text/special_text.h"

namespace tessera {

StatusOr<GenerateInput> ProcessInput(Request request, bool skip_special_tokens, bool include_stop_str_in_output,
                                     const ModelLimits& limits) {
  RETURN_IF_ERROR(ValidateRequest(request, limits));
  GenerateInput in;
  in.request = std::move(request);
  in.skip_special_tokens = skip_special_tokens;
  in.include_stop_str_in_output = include_stop_str_in_output;
  return in;
}

StatusOr<ChatPrompt> RenderChatPromptTokens(const text::Tokenizer& tokenizer, const ChatPromptInput& in) {
  text::SpecialTextMasker masker(tokenizer);
  const bool mask = !in.content_special_tokens;
  StatusOr<std::string> rendered =
      RenderChatPrompt(in.chat_template, in.model_name, mask ? masker.Mask(in.messages) : in.messages,
                       mask ? masker.Mask(in.tools) : in.tools, in.add_generation_prompt && !in.continue_final_message,
                       mask ? masker.Mask(in.template_kwargs) : in.template_kwargs, in.now_unix_seconds);
  if (!rendered.ok()) return rendered.status();
  if (in.continue_final_message && in.messages.is_array() && !in.messages.empty()) {
    // Cut what the template appended after the final message (end-of-turn tokens).
    const auto& last = in.messages.back();
    auto it = last.find("content");
    if (it != last.end() && it->is_string() && !it->get_ref<const std::string&>().empty()) {
      const std::string content = mask ? masker.MaskString(it->get_ref<const std::string&>()) : it->get<std::string>();
      if (const size_t at = rendered->rfind(content); at != std::string::npos) rendered->resize(at + content.size());
    }
  }
  ASSIGN_OR_RETURN(text::PlainSpans plain, masker.Unmask(*rendered));
  ChatPrompt out;
  out.ids = tokenizer.Encode(plain.text, in.add_special_tokens, plain.spans);
  out.text = std::move(plain.text);
  return out;
}

}  // namespace tessera
