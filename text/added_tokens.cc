#include "text/added_tokens.h"

#include <algorithm>

#include "text/utf8.h"

namespace tessera::text {
namespace {

bool IsWordChar(char32_t c) {
  return c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}

char32_t CodePointBefore(std::string_view s, size_t pos) {
  size_t b = pos - 1;
  while (b > 0 && (static_cast<uint8_t>(s[b]) & 0xC0) == 0x80) --b;
  return NextCodePoint(s, &b);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) {
  nodes_.emplace_back();
  for (const AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    const auto index = static_cast<int32_t>(tokens_.size());
    tokens_.push_back(t);
    int32_t node = 0;
    for (char ch : t.content) {
      const auto b = static_cast<uint8_t>(ch);
      int32_t next = Child(node, b);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
        auto& ch_list = nodes_[node].children;
        ch_list.insert(std::lower_bound(ch_list.begin(), ch_list.end(), std::make_pair(b, int32_t{-1})),
                       {b, next});
      }
      node = next;
    }
    if (nodes_[node].token < 0) nodes_[node].token = index;  // first definition wins
    first_byte_[static_cast<uint8_t>(t.content[0])] = true;
  }
}

int32_t AddedTokenMatcher::Child(int32_t node, uint8_t b) const {
  const auto& ch = nodes_[node].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), std::make_pair(b, int32_t{-1}));
  return (it != ch.end() && it->first == b) ? it->second : -1;
}

int32_t AddedTokenMatcher::LongestAt(std::string_view text, size_t pos, size_t no_special_before,
                                     size_t* len) const {
  int32_t node = 0, best = -1;
  for (size_t j = pos; j < text.size(); ++j) {
    node = Child(node, static_cast<uint8_t>(text[j]));
    if (node < 0) break;
    if (nodes_[node].token >= 0) {
      const AddedToken& t = tokens_[nodes_[node].token];
      const size_t end = j + 1;
      bool ok = !(t.special && end > no_special_before);
      if (t.single_word) {
        if (pos > 0 && IsWordChar(CodePointBefore(text, pos))) ok = false;
        size_t k = end;
        if (end < text.size() && IsWordChar(NextCodePoint(text, &k))) ok = false;
      }
      if (ok) {
        best = nodes_[node].token;
        *len = end - pos;
      }
    }
  }
  return best;
}

std::vector<AddedTokenMatcher::Piece> AddedTokenMatcher::Split(std::string_view text,
                                                               std::span<const TextSpan> plain_spans) const {
  std::vector<Piece> out;
  if (tokens_.empty()) {
    out.push_back({text, -1});
    return out;
  }
  size_t start = 0;  // start of the pending plain text
  size_t i = 0;
  size_t next_plain = 0;  // first of plain_spans not entirely before i
  // A special token starting at i must end at or before the next plain span's begin.
  auto no_special_before = [&] {
    while (next_plain < plain_spans.size() && plain_spans[next_plain].end <= i) ++next_plain;
    if (next_plain == plain_spans.size()) return text.size();
    return plain_spans[next_plain].begin <= i ? i : plain_spans[next_plain].begin;
  };
  bool strip_next_left = false;  // previous token has rstrip
  auto flush_plain = [&](size_t end, bool strip_right) {
    std::string_view plain = text.substr(start, end - start);
    if (strip_next_left) plain = TrimJsWhitespaceLeft(plain);
    if (strip_right) plain = TrimJsWhitespaceRight(plain);
    if (!plain.empty()) out.push_back({plain, -1});
  };
  while (i < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[i])]) {
      ++i;
      continue;
    }
    size_t len = 0;
    const int32_t tok = LongestAt(text, i, no_special_before(), &len);
    if (tok < 0) {
      ++i;
      continue;
    }
    flush_plain(i, tokens_[tok].lstrip);
    out.push_back({text.substr(i, len), tok});
    strip_next_left = tokens_[tok].rstrip;
    i += len;
    start = i;
  }
  flush_plain(text.size(), false);
  return out;
}

}  // namespace tessera::text
