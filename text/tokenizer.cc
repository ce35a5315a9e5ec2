#include "text/tokenizer.h"

#include <cstdlib>

#include "text/bpe_model.h"
#include "text/byte_level.h"
#include "text/decoders.h"
#include "text/normalizers.h"
#include "text/pre_tokenizers.h"
#include "text/utf8.h"

namespace tessera::text {

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  return Encode(text, add_special_tokens, {});
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special_tokens,
                                       std::span<const TextSpan> plain_spans) const {
  std::string repaired;
  std::vector<TextSpan> repaired_spans;
  if (!IsValidUtf8(text)) {
    // Repaired piece by piece at the span boundaries, so the spans map onto the repaired text.
    size_t at = 0;
    for (const TextSpan& span : plain_spans) {
      repaired += RepairUtf8(text.substr(at, span.begin - at));
      const size_t begin = repaired.size();
      repaired += RepairUtf8(text.substr(span.begin, span.end - span.begin));
      repaired_spans.push_back({begin, repaired.size()});
      at = span.end;
    }
    repaired += RepairUtf8(text.substr(at));
    text = repaired;
    plain_spans = repaired_spans;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids.insert(ids.end(), template_.prefix.begin(), template_.prefix.end());
  bool first = true;
  for (const AddedTokenMatcher::Piece& p : raw_matcher_.Split(text, plain_spans)) {
    if (p.token >= 0) {
      ids.push_back(raw_matcher_.tokens()[p.token].id);
    } else {
      // Sections are counted like the oracle: "first" is the very beginning.
      EncodeSection(p.text, first && p.text.data() == text.data(), &ids);
    }
    first = false;
  }
  if (add_special_tokens) ids.insert(ids.end(), template_.suffix.begin(), template_.suffix.end());
  return ids;
}

void Tokenizer::EncodeSection(std::string_view text, bool first_section, std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  std::string normalized = normalizer_ ? normalizer_->Normalize(text) : std::string(text);
  if (normalized_matcher_.empty()) {
    EncodeNormalized(normalized, first_section, ids);
    return;
  }
  bool first = first_section;
  for (const AddedTokenMatcher::Piece& p : normalized_matcher_.Split(normalized)) {
    if (p.token >= 0) {
      ids->push_back(normalized_matcher_.tokens()[p.token].id);
    } else {
      EncodeNormalized(p.text, first, ids);
    }
    first = false;
  }
}

void Tokenizer::EncodeNormalized(std::string_view normalized, bool first_section, std::vector<int32_t>* ids) const {
  if (normalized.empty()) return;
  std::vector<std::string> pieces;
  pieces.emplace_back(normalized);
  if (pre_tokenizer_) pre_tokenizer_->PreTokenize(&pieces, first_section);
  model_->Encode(pieces, ids);
}

StatusOr<std::string> Tokenizer::Decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  DecodeChain chain;
  chain.tokens.reserve(ids.size());
  chain.added.reserve(ids.size());
  for (const int32_t id : ids) {
    if (options.skip_special_tokens && IsSpecial(id)) continue;
    if (auto it = added_by_id_.find(id); it != added_by_id_.end()) {
      chain.tokens.push_back(it->second.content);
      chain.added.push_back(1);
      continue;
    }
    const std::string* tok = model_->IdToToken(id);
    if (tok == nullptr) return OutOfRange("token id " + std::to_string(id) + " is not in the vocabulary");
    chain.tokens.push_back(*tok);
    chain.added.push_back(0);
  }
  if (decoder_) {
    decoder_->Decode(&chain);
  } else if (!chain.tokens.empty()) {
    // No decoder: HF joins tokens with spaces.
    std::string joined;
    for (size_t i = 0; i < chain.tokens.size(); ++i) {
      if (i > 0) joined += ' ';
      joined += chain.tokens[i];
    }
    chain.tokens.assign(1, std::move(joined));
  }
  std::string text;
  for (const std::string& t : chain.tokens) text += t;
  if (!IsValidUtf8(text)) text = RepairUtf8(text);
  if (clean_up_ && options.clean_up) text = CleanUpTokenization(text);
  return text;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  for (const auto* m : {&raw_matcher_, &normalized_matcher_}) {
    for (const AddedToken& t : m->tokens()) {
      if (t.content == token) return t.id;
    }
  }
  return model_->TokenToId(token);
}

const std::string* Tokenizer::IdToToken(int32_t id) const {
  if (auto it = added_by_id_.find(id); it != added_by_id_.end()) return &it->second.content;
  return model_->IdToToken(id);
}

std::optional<std::string> Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || IsSpecial(id)) return std::nullopt;
  if (auto it = added_by_id_.find(id); it != added_by_id_.end()) return it->second.content;
  const std::string* tok = model_->IdToToken(id);
  if (tok == nullptr) return std::nullopt;
  std::string out;
  if (byte_level_decoder_) {
    size_t i = 0;
    while (i < tok->size()) {
      const size_t b = i;
      const int byte = UnicodeToByte(NextCodePoint(*tok, &i));
      if (byte >= 0) {
        out.push_back(static_cast<char>(byte));
      } else {
        out.append(*tok, b, i - b);
      }
    }
    return out;
  }
  if (byte_fallback_decoder_ && tok->size() == 6 && tok->compare(0, 3, "<0x") == 0 && (*tok)[5] == '>') {
    const std::string hex = tok->substr(3, 2);
    char* end = nullptr;
    const long v = std::strtol(hex.c_str(), &end, 16);
    if (end == hex.c_str() + 2) return std::string(1, static_cast<char>(v));
  }
  out = *tok;
  if (metaspace_decoder_) {
    static const std::string kSpace = "\xe2\x96\x81";
    for (size_t p = out.find(kSpace); p != std::string::npos; p = out.find(kSpace, p + 1)) out.replace(p, 3, " ");
  }
  return out;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < special_.size() && special_[id];
}

std::string CleanUpTokenization(std::string_view text) {
  // Applied in this order, each as a global left-to-right replacement.
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  std::string s(text);
  if (s.find(' ') == std::string::npos) return s;
  for (const auto& [from, to] : kRules) {
    if (s.find(from) != std::string::npos) s = ReplaceAll(s, from, nullptr, to);
  }
  return s;
}

}  // namespace tessera::text
