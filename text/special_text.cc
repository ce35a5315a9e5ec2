#include "text/special_text.h"

#include <random>

#include <fmt/format.h>

namespace tessera::text {

SpecialTextMasker::SpecialTextMasker(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  marker_ = fmt::format("SPTXT{:016x}", r);
}

std::string SpecialTextMasker::MaskString(std::string_view s) {
  const AddedTokenMatcher& m = tokenizer_.special_text_matcher();
  std::string out;
  for (const AddedTokenMatcher::Piece& p : m.Split(s)) {
    if (p.token < 0) {
      out += p.text;
      continue;
    }
    const std::string& content = m.tokens()[p.token].content;
    size_t index = 0;
    while (index < masked_.size() && masked_[index] != content) ++index;
    if (index == masked_.size()) masked_.push_back(content);
    out += fmt::format("{}{}Z", marker_, index);
  }
  return out;
}

void SpecialTextMasker::MaskInPlace(nlohmann::ordered_json* value) {
  if (value->is_string()) {
    const size_t before = masked_.size();
    std::string masked = MaskString(value->get_ref<const std::string&>());
    if (masked_.size() != before || masked != value->get_ref<const std::string&>()) *value = std::move(masked);
  } else if (value->is_structured()) {
    for (auto& child : *value) MaskInPlace(&child);
  }
}

nlohmann::ordered_json SpecialTextMasker::Mask(const nlohmann::ordered_json& value) {
  if (tokenizer_.special_text_matcher().empty()) return value;
  nlohmann::ordered_json out = value;
  MaskInPlace(&out);
  return out;
}

StatusOr<PlainSpans> SpecialTextMasker::Unmask(std::string_view rendered) const {
  PlainSpans out;
  if (masked_.empty()) {
    out.text = rendered;
    return out;
  }
  out.text.reserve(rendered.size());
  size_t at = 0;
  for (size_t p = rendered.find(marker_); p != std::string_view::npos; p = rendered.find(marker_, at)) {
    out.text.append(rendered, at, p - at);
    size_t q = p + marker_.size();
    size_t index = 0;
    const size_t digits = q;
    while (q < rendered.size() && rendered[q] >= '0' && rendered[q] <= '9' && q - digits < 9) {
      index = index * 10 + static_cast<size_t>(rendered[q] - '0');
      ++q;
    }
    if (q == digits || q >= rendered.size() || rendered[q] != 'Z' || index >= masked_.size()) {
      return InvalidArgument("'messages': the chat template altered message text that holds special-token text");
    }
    const size_t begin = out.text.size();
    out.text += masked_[index];
    out.spans.push_back({begin, out.text.size()});
    at = q + 1;
  }
  out.text.append(rendered, at);
  return out;
}

}  // namespace tessera::text
