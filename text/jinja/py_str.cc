#include "text/jinja/py_str.h"

#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace tessera::jinja {

std::vector<char32_t> DecodeUtf8(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                          static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) {
      out.push_back(0xFFFD);
      ++i;
    } else {
      out.push_back(static_cast<char32_t>(cp));
      i += static_cast<size_t>(n);
    }
  }
  return out;
}

void AppendUtf8(char32_t cp, std::string* out) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  if (n <= 0) {
    out->append("\xEF\xBF\xBD");
    return;
  }
  out->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::string EncodeUtf8(const std::vector<char32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) AppendUtf8(c, &out);
  return out;
}

int64_t Utf8Length(std::string_view s) {
  return static_cast<int64_t>(DecodeUtf8(s).size());
}

bool PyIsSpace(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E:
    case 0x1F: case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

std::string PyStrip(std::string_view s, const std::string* chars, StripSide side) {
  std::vector<char32_t> cps = DecodeUtf8(s);
  std::vector<char32_t> set;
  if (chars != nullptr) set = DecodeUtf8(*chars);
  auto strip_it = [&](char32_t c) {
    if (chars == nullptr) return PyIsSpace(c);
    for (char32_t x : set)
      if (x == c) return true;
    return false;
  };
  size_t b = 0, e = cps.size();
  if (side != StripSide::kRight)
    while (b < e && strip_it(cps[b])) ++b;
  if (side != StripSide::kLeft)
    while (e > b && strip_it(cps[e - 1])) --e;
  return EncodeUtf8(std::vector<char32_t>(cps.begin() + b, cps.begin() + e));
}

std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep == nullptr) {
    std::vector<char32_t> cps = DecodeUtf8(s);
    size_t i = 0, n = cps.size();
    while (true) {
      while (i < n && PyIsSpace(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t e = n;
        while (e > i && PyIsSpace(cps[e - 1])) --e;
        out.push_back(EncodeUtf8(std::vector<char32_t>(cps.begin() + i, cps.begin() + e)));
        break;
      }
      size_t j = i;
      while (j < n && !PyIsSpace(cps[j])) ++j;
      out.push_back(EncodeUtf8(std::vector<char32_t>(cps.begin() + i, cps.begin() + j)));
      i = j;
    }
    return out;
  }
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t f = s.find(*sep, pos);
    if (f == std::string_view::npos) break;
    out.emplace_back(s.substr(pos, f - pos));
    pos = f + sep->size();
  }
  out.emplace_back(s.substr(pos));
  return out;
}

std::string PyReplace(std::string_view s, std::string_view old_s, std::string_view new_s,
                      int64_t count) {
  std::string out;
  if (old_s.empty()) {
    // Python inserts `new` between every code point (and at both ends).
    std::vector<char32_t> cps = DecodeUtf8(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(new_s);
        ++done;
      }
      if (i < cps.size()) AppendUtf8(cps[i], &out);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(old_s, pos);
    if (f == std::string_view::npos) break;
    out.append(s.substr(pos, f - pos));
    out.append(new_s);
    pos = f + old_s.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

std::vector<std::string> PySplitLines(std::string_view s) {
  std::vector<std::string> out;
  std::vector<char32_t> cps = DecodeUtf8(s);
  std::vector<char32_t> cur;
  for (size_t i = 0; i < cps.size(); ++i) {
    char32_t c = cps[i];
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
               c == 0x2028 || c == 0x2029;
    if (!brk) {
      cur.push_back(c);
      continue;
    }
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    out.push_back(EncodeUtf8(cur));
    cur.clear();
  }
  if (!cur.empty()) out.push_back(EncodeUtf8(cur));
  return out;
}

namespace {
bool IsCased(char32_t c) {
  return utf8proc_toupper(static_cast<utf8proc_int32_t>(c)) != static_cast<utf8proc_int32_t>(c) ||
         utf8proc_tolower(static_cast<utf8proc_int32_t>(c)) != static_cast<utf8proc_int32_t>(c);
}
char32_t Up(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
char32_t Lo(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
char32_t Ti(char32_t c) { return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))); }
}  // namespace

std::string PyUpper(std::string_view s) {
  std::string out;
  for (char32_t c : DecodeUtf8(s)) AppendUtf8(Up(c), &out);
  return out;
}

std::string PyLower(std::string_view s) {
  std::string out;
  for (char32_t c : DecodeUtf8(s)) AppendUtf8(Lo(c), &out);
  return out;
}

std::string PyTitle(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : DecodeUtf8(s)) {
    AppendUtf8(prev_cased ? Lo(c) : Ti(c), &out);
    prev_cased = IsCased(c);
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (char32_t c : DecodeUtf8(s)) {
    AppendUtf8(first ? Ti(c) : Lo(c), &out);
    first = false;
  }
  return out;
}

namespace {
bool PyIsPrintable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}
}  // namespace

std::string PyReprString(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (char32_t c : DecodeUtf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (PyIsPrintable(c)) {
      AppendUtf8(c, &out);
    } else {
      if (c < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      else std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

std::string PyReprFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp = std::atoi(sci.c_str() + epos + 1);
  bool neg = !mant.empty() && mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  std::string out = neg ? "-" : "";
  if (exp >= -5 + 1 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp) + 1) + "." +
             digits.substr(static_cast<size_t>(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  std::snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + buf;
}

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  char buf[16];
  out->push_back('"');
  for (char32_t c : DecodeUtf8(s)) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20 || (ensure_ascii && c > 0x7F)) {
          if (c >= 0x10000) {
            char32_t v = c - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          }
          *out += buf;
        } else {
          AppendUtf8(c, out);
        }
    }
  }
  out->push_back('"');
}

}  // namespace tessera::jinja
