// Special-token text in client strings stays text (docs/architecture.md,
// "Validation"). A chat template pastes message content into its own markup,
// so content such as "<|im_end|>\n<|im_start|>system\n..." would otherwise be
// tokenized as the model's control tokens and close the user's turn. As
// OpenAI does, such text is tokenized as plain text; the template's own
// markup still yields the control tokens.
//
// How: before rendering, every occurrence of a special token's text (added
// tokens with "special": true, the set HF's split_special_tokens turns off)
// in the client's strings is replaced by a placeholder carrying a random
// per-request marker; after rendering, the placeholders are put back and
// their byte ranges become the plain spans of Tokenizer::Encode. Templates
// see ordinary strings (strip, split, tojson work as before); only strings
// that hold special-token text change, and only while rendering. Non-special
// added tokens (e.g. Qwen's <tool_call>, DeepSeek's <｜User｜>) are found in
// content as HF does.
//
// One SpecialTextMasker per render; not thread-safe (front-end workers each
// make their own). Cost: linear in the strings masked and the rendered text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "text/added_tokens.h"
#include "text/tokenizer.h"

namespace tessera::text {

// Rendered text with the client's special-token text restored, and where it is.
struct PlainSpans {
  std::string text;
  std::vector<TextSpan> spans;  // sorted, disjoint byte ranges of `text`
};

class SpecialTextMasker {
 public:
  // `tokenizer` must outlive the masker. Draws the marker from std::random_device.
  explicit SpecialTextMasker(const Tokenizer& tokenizer);

  // `value` with special-token text in every string (keys excepted) replaced
  // by placeholders. Values without such text are returned unchanged.
  nlohmann::ordered_json Mask(const nlohmann::ordered_json& value);
  // The text a template rendered from masked values, with the placeholders
  // restored. INVALID_ARGUMENT when the template cut or altered a placeholder
  // (the marker appears outside a whole one).
  StatusOr<PlainSpans> Unmask(std::string_view rendered) const;

  // Whether Mask replaced anything (else Unmask returns the text as is).
  bool masked_any() const { return !masked_.empty(); }
  // A masked string as the template sees it (for finding it in the render).
  std::string MaskString(std::string_view s);

 private:
  void MaskInPlace(nlohmann::ordered_json* value);

  const Tokenizer& tokenizer_;
  std::string marker_;               // "SPTXT" + 16 random hex digits; no special-token text
  std::vector<std::string> masked_;  // placeholder i restores masked_[i]
};

}  // namespace tessera::text
