#include "text/utf8.h"

#include <cstdlib>

#include <utf8proc.h>

namespace tessera::text {

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

namespace {

// Length of the valid sequence at s[i], or 0 with *maximal set to the length of
// the maximal subpart (>= 1) to replace by one U+FFFD.
size_t ValidSeqAt(std::string_view s, size_t i, size_t* maximal) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *maximal = 1;
    return 0;
  }
  size_t k = 0;
  for (; k < need; ++k) {
    if (i + 1 + k >= s.size()) break;
    const auto b = static_cast<uint8_t>(s[i + 1 + k]);
    if (b < lo || b > hi) break;
    lo = 0x80;
    hi = 0xBF;
  }
  if (k == need) return need + 1;
  *maximal = k + 1;
  return 0;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  size_t i = 0, m = 0;
  while (i < s.size()) {
    // ASCII fast path.
    if (static_cast<uint8_t>(s[i]) < 0x80) { ++i; continue; }
    const size_t n = ValidSeqAt(s, i, &m);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string RepairUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0, m = 0;
  while (i < s.size()) {
    const size_t n = ValidSeqAt(s, i, &m);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      AppendUtf8(kReplacementChar, &out);
      i += m;
    }
  }
  return out;
}

size_t CompleteUtf8Prefix(std::string_view s) {
  // Walk back over at most 3 continuation bytes to the last lead byte.
  size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto b = static_cast<uint8_t>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte
    if (b < 0x80) return n;
    size_t m = 0;
    const size_t valid = ValidSeqAt(s, n - back, &m);
    if (valid > 0) return n;
    // Ill-formed but possibly just truncated: a maximal subpart reaching the end.
    return (n - back + m == n) ? n - back : n;
  }
  return n;
}

bool IsJsWhitespace(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D);
  if (c < 0xA0) return false;
  return c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

const char kJsWhitespaceClass[] =
    "\\x{9}-\\x{d}\\x{20}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}\\x{feff}";

std::string_view TrimJsWhitespaceLeft(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!IsJsWhitespace(NextCodePoint(s, &j))) break;
    i = j;
  }
  return s.substr(i);
}

std::string_view TrimJsWhitespaceRight(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    size_t j = start;
    if (!IsJsWhitespace(NextCodePoint(s, &j))) break;
    end = start;
  }
  return s.substr(0, end);
}

std::string Normalize(std::string_view s, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  // Fast path: pure ASCII is invariant under every form.
  bool ascii = true;
  for (char ch : s) {
    if (static_cast<uint8_t>(ch) >= 0x80) { ascii = false; break; }
  }
  if (ascii) return std::string(s);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) return std::string(s);  // only on invalid input, which callers exclude
  std::string result(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

std::string Lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const char32_t c = NextCodePoint(s, &i);
    AppendUtf8(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))), &out);
  }
  return out;
}

}  // namespace tessera::text
