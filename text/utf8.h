// UTF-8 helpers for the text layer: decoding, lossy repair, the whitespace set
// the tokenizer uses, and Unicode normalization (utf8proc). All functions are
// pure and thread-safe; costs are linear in the input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::text {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Decodes the code point at s[*i] and advances *i. `s` must be valid UTF-8.
inline char32_t NextCodePoint(std::string_view s, size_t* i) {
  const auto b0 = static_cast<uint8_t>(s[*i]);
  if (b0 < 0x80) { ++*i; return b0; }
  if (b0 < 0xE0) {
    char32_t c = ((b0 & 0x1F) << 6) | (static_cast<uint8_t>(s[*i + 1]) & 0x3F);
    *i += 2;
    return c;
  }
  if (b0 < 0xF0) {
    char32_t c = ((b0 & 0x0F) << 12) | ((static_cast<uint8_t>(s[*i + 1]) & 0x3F) << 6) |
                 (static_cast<uint8_t>(s[*i + 2]) & 0x3F);
    *i += 3;
    return c;
  }
  char32_t c = ((b0 & 0x07) << 18) | ((static_cast<uint8_t>(s[*i + 1]) & 0x3F) << 12) |
               ((static_cast<uint8_t>(s[*i + 2]) & 0x3F) << 6) | (static_cast<uint8_t>(s[*i + 3]) & 0x3F);
  *i += 4;
  return c;
}

// Length in bytes of the UTF-8 sequence starting with lead byte `b` (1 for invalid leads).
inline size_t Utf8SeqLen(uint8_t b) {
  if (b < 0xC0) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  return 4;
}

void AppendUtf8(char32_t c, std::string* out);

// True when `s` is well-formed UTF-8 (no surrogates, overlongs or values > U+10FFFF).
bool IsValidUtf8(std::string_view s);

// Replaces every ill-formed subsequence with U+FFFD using the WHATWG/Unicode
// "maximal subpart" rule (the same as TextDecoder and Rust's from_utf8_lossy).
std::string RepairUtf8(std::string_view s);

// Byte length of the longest prefix of `s` that does not end inside an
// incomplete (but so far valid) multi-byte sequence.
size_t CompleteUtf8Prefix(std::string_view s);

// The whitespace set of ECMAScript \s (the tokenizer oracle's definition):
// U+0009-000D, U+0020, U+00A0, U+1680, U+2000-200A, U+2028, U+2029, U+202F,
// U+205F, U+3000, U+FEFF. Note: differs from Rust/Oniguruma White_Space on
// U+0085 (not whitespace here) and U+FEFF (whitespace here).
bool IsJsWhitespace(char32_t c);
// The same set as a PCRE2 class body (without brackets).
extern const char kJsWhitespaceClass[];

std::string_view TrimJsWhitespaceLeft(std::string_view s);
std::string_view TrimJsWhitespaceRight(std::string_view s);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// Unicode normalization of valid UTF-8 via utf8proc.
std::string Normalize(std::string_view s, NormalForm form);
// Full-string lowercase by simple per-code-point mapping (utf8proc_tolower).
std::string Lowercase(std::string_view s);

}  // namespace tessera::text
