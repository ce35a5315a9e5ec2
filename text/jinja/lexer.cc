#include "text/jinja/lexer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "text/jinja/error.h"
#include "text/jinja/py_str.h"

namespace tessera::jinja {

const char* TokenTypeName(TokenType t) {
  switch (t) {
    case TokenType::kData: return "template data";
    case TokenType::kVarBegin: return "'{{'";
    case TokenType::kVarEnd: return "'}}'";
    case TokenType::kBlockBegin: return "'{%'";
    case TokenType::kBlockEnd: return "'%}'";
    case TokenType::kName: return "name";
    case TokenType::kString: return "string";
    case TokenType::kInt: return "integer";
    case TokenType::kFloat: return "float";
    case TokenType::kOp: return "operator";
    case TokenType::kEof: return "end of template";
  }
  return "token";
}

namespace {

bool IsAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

// Python's str.isspace() over a UTF-8 text, and rstrip with it.
bool AllSpace(std::string_view s) {
  for (char32_t c : DecodeUtf8(s))
    if (!PyIsSpace(c)) return false;
  return !s.empty();
}
size_t RStripLen(std::string_view s) {
  std::vector<char32_t> cps = DecodeUtf8(s);
  size_t bytes = s.size();
  for (size_t i = cps.size(); i > 0 && PyIsSpace(cps[i - 1]); --i) {
    std::string enc;
    AppendUtf8(cps[i - 1], &enc);
    bytes -= enc.size();
  }
  return bytes;
}
// Length of the leading run of Python whitespace.
size_t LStripLen(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (IsAsciiSpace(s[i]) || (s[i] >= 0x1c && s[i] <= 0x1f)) { ++i; continue; }
    if (static_cast<unsigned char>(s[i]) < 0x80) break;
    size_t n = 1;
    while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
    std::vector<char32_t> cp = DecodeUtf8(s.substr(i, n));
    if (cp.size() != 1 || !PyIsSpace(cp[0])) break;
    i += n;
  }
  return i;
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& o) : src_(std::move(source)), opt_(o) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> Run() {
    size_t pos = 0;
    const size_t n = src_.size();
    while (pos < n) {
      size_t tag = FindTag(pos);
      if (tag == std::string::npos) {
        Emit(TokenType::kData, src_.substr(pos), pos);
        break;
      }
      char kind = src_[tag + 1];
      size_t after = tag + 2;
      char sign = (after < n && (src_[after] == '-' || src_[after] == '+')) ? src_[after] : 0;
      bool raw = kind == '%' && IsRawTag(tag, "raw", nullptr);
      std::string_view text(src_.data() + pos, tag - pos);
      size_t keep = ApplyLeftStrip(text, sign, kind != '{', pos);
      if (keep > 0) Emit(TokenType::kData, std::string(text.substr(0, keep)), pos);
      if (sign) ++after;
      if (raw) {
        pos = LexRaw(tag);
      } else if (kind == '#') {
        pos = LexComment(tag, after);
      } else {
        pos = LexTag(tag, after, kind == '%');
      }
    }
    Token eof{TokenType::kEof, "", 0, 0, 0, 0};
    Pos(src_.size(), &eof.line, &eof.column);
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

  const std::string& source() const { return src_; }

 private:
  void Pos(size_t off, int* line, int* col) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off);
    size_t ls = *(it - 1);
    *line = static_cast<int>(it - line_starts_.begin());
    int c = 1;
    for (size_t i = ls; i < off && i < src_.size(); ++i) c += (static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80;
    *col = c;
  }
  [[noreturn]] void Error(const std::string& msg, size_t off) const {
    int l, c;
    Pos(off, &l, &c);
    Fail(TemplateError::Kind::kSyntax, msg, l, c);
  }
  void Emit(TokenType t, std::string v, size_t off) {
    Token tok{t, std::move(v), 0, 0, 0, 0};
    Pos(off, &tok.line, &tok.column);
    tokens_.push_back(std::move(tok));
  }

  // Earliest "{{", "{%" or "{#" at or after pos.
  size_t FindTag(size_t pos) const {
    while (true) {
      size_t i = src_.find('{', pos);
      if (i == std::string::npos || i + 1 >= src_.size()) return std::string::npos;
      char c = src_[i + 1];
      if (c == '{' || c == '%' || c == '#') return i;
      pos = i + 1;
    }
  }

  // Matches `{%[-+]?\s*WORD\s*(-%}\s*|+%}|%}\n?)` at `tag`; sets *end past it.
  bool IsRawTag(size_t tag, std::string_view word, size_t* end) const {
    size_t i = tag + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    while (i < src_.size() && IsAsciiSpace(src_[i])) ++i;
    if (src_.compare(i, word.size(), word) != 0) return false;
    i += word.size();
    while (i < src_.size() && IsAsciiSpace(src_[i])) ++i;
    bool is_end = word != "raw";
    if (src_.compare(i, 3, "-%}") == 0) {
      i += 3;
      i += LStripLen(std::string_view(src_).substr(i));
    } else if (is_end && src_.compare(i, 3, "+%}") == 0) {
      i += 3;
    } else if (src_.compare(i, 2, "%}") == 0) {
      i += 2;
      if (is_end && opt_.trim_blocks && i < src_.size() && src_[i] == '\n') ++i;
    } else {
      return false;
    }
    if (end) *end = i;
    return true;
  }

  // Jinja's OptionalLStrip: returns how many bytes of `text` to keep.
  size_t ApplyLeftStrip(std::string_view text, char sign, bool is_block, size_t text_start) const {
    if (sign == '-') return RStripLen(text);
    if (sign == '+' || !opt_.lstrip_blocks || !is_block) return text.size();
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    bool line_starting = text_start == 0 || src_[text_start - 1] == '\n';
    if ((l_pos > 0 || line_starting) && AllSpace(text.substr(l_pos))) return l_pos;
    return text.size();
  }

  size_t LexRaw(size_t tag) {
    size_t content = 0;
    IsRawTag(tag, "raw", &content);
    for (size_t p = content;;) {
      size_t t = src_.find("{%", p);
      if (t == std::string::npos) Error("Missing end of raw directive", tag);
      size_t end;
      if (IsRawTag(t, "endraw", &end)) {
        char sign = (src_[t + 2] == '-' || src_[t + 2] == '+') ? src_[t + 2] : 0;
        std::string_view text(src_.data() + content, t - content);
        size_t keep = ApplyLeftStrip(text, sign, true, content);
        if (keep > 0) Emit(TokenType::kData, std::string(text.substr(0, keep)), content);
        return end;
      }
      p = t + 2;
    }
  }

  size_t LexComment(size_t tag, size_t after) {
    size_t e = src_.find("#}", after);
    if (e == std::string::npos) Error("Missing end of comment tag", tag);
    size_t end = e + 2;
    if (e > after && src_[e - 1] == '-') {
      end += LStripLen(std::string_view(src_).substr(end));
    } else if (e > after && src_[e - 1] == '+') {
    } else if (opt_.trim_blocks && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    return end;
  }

  size_t LexTag(size_t tag, size_t p, bool block) {
    Emit(block ? TokenType::kBlockBegin : TokenType::kVarBegin, "", tag);
    std::vector<char> balance;
    const size_t n = src_.size();
    while (true) {
      if (p >= n) Error(block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'", tag);
      if (balance.empty()) {
        if (block) {
          if (src_.compare(p, 3, "+%}") == 0) {
            Emit(TokenType::kBlockEnd, "", p);
            return p + 3;
          }
          if (src_.compare(p, 3, "-%}") == 0) {
            Emit(TokenType::kBlockEnd, "", p);
            return p + 3 + LStripLen(std::string_view(src_).substr(p + 3));
          }
          if (src_.compare(p, 2, "%}") == 0) {
            Emit(TokenType::kBlockEnd, "", p);
            size_t e = p + 2;
            if (opt_.trim_blocks && e < n && src_[e] == '\n') ++e;
            return e;
          }
        } else {
          if (src_.compare(p, 3, "-}}") == 0) {
            Emit(TokenType::kVarEnd, "", p);
            return p + 3 + LStripLen(std::string_view(src_).substr(p + 3));
          }
          if (src_.compare(p, 2, "}}") == 0) {
            Emit(TokenType::kVarEnd, "", p);
            return p + 2;
          }
        }
      }
      char c = src_[p];
      if (IsAsciiSpace(c)) {
        ++p;
      } else if (IsDigit(c)) {
        p = LexNumber(p);
      } else if (IsNameStart(c)) {
        size_t e = p;
        while (e < n && IsNameChar(src_[e])) ++e;
        Emit(TokenType::kName, src_.substr(p, e - p), p);
        p = e;
      } else if (c == '\'' || c == '"') {
        p = LexString(p);
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%",
                                     "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".",
                                     ":", "|", ",", ";"};
        const char* op = nullptr;
        for (const char* o : kOps) {
          if (src_.compare(p, std::char_traits<char>::length(o), o) == 0) {
            op = o;
            break;
          }
        }
        if (!op) Error(std::string("unexpected char ") + PyReprString(DecodeOne(p)), p);
        std::string o(op);
        if (o == "{" || o == "(" || o == "[") {
          balance.push_back(o == "{" ? '}' : o == "(" ? ')' : ']');
        } else if (o == "}" || o == ")" || o == "]") {
          if (balance.empty()) Error("unexpected '" + o + "'", p);
          if (balance.back() != o[0]) Error("unexpected '" + o + "', expected '" + std::string(1, balance.back()) + "'", p);
          balance.pop_back();
        }
        Emit(TokenType::kOp, o, p);
        p += o.size();
      }
    }
  }

  std::string DecodeOne(size_t p) const {
    size_t n = 1;
    while (p + n < src_.size() && (static_cast<unsigned char>(src_[p + n]) & 0xC0) == 0x80 && n < 4) ++n;
    return src_.substr(p, n);
  }

  // (\d+_)*\d+ starting at p; returns end (== p if none).
  size_t Digits(size_t p) const {
    size_t e = p;
    while (true) {
      size_t s = e;
      while (e < src_.size() && IsDigit(src_[e])) ++e;
      if (e == s) return s == p ? p : s - 1;  // back off a trailing '_'
      if (e < src_.size() && src_[e] == '_' && e + 1 < src_.size() && IsDigit(src_[e + 1])) {
        ++e;
        continue;
      }
      return e;
    }
  }

  size_t LexNumber(size_t p) {
    size_t e = Digits(p);
    size_t f = e;
    bool is_float = false;
    if (f < src_.size() && src_[f] == '.' && f + 1 < src_.size() && IsDigit(src_[f + 1])) {
      f = Digits(f + 1);
      is_float = true;
    }
    if (f < src_.size() && (src_[f] == 'e' || src_[f] == 'E')) {
      size_t q = f + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && IsDigit(src_[q])) {
        f = Digits(q);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = p; i < (is_float ? f : e); ++i)
      if (src_[i] != '_') text.push_back(src_[i]);
    if (is_float) {
      Token t{TokenType::kFloat, text, 0, std::strtod(text.c_str(), nullptr), 0, 0};
      Pos(p, &t.line, &t.column);
      tokens_.push_back(std::move(t));
      return f;
    }
    if (text.size() > 1 && text[0] == '0') {
      // Jinja: "0(_?0)*" is zero; other leading-zero forms (hex/octal/binary) unsupported.
      if (text.find_first_not_of('0') != std::string::npos) Error("unsupported integer literal", p);
    }
    errno = 0;
    long long v = std::strtoll(text.c_str(), nullptr, 10);
    if (errno == ERANGE) Error("integer literal too large", p);
    Token t{TokenType::kInt, text, v, 0, 0, 0};
    Pos(p, &t.line, &t.column);
    tokens_.push_back(std::move(t));
    return e;
  }

  static int Hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  size_t LexString(size_t p) {
    char q = src_[p];
    size_t i = p + 1;
    std::string out;
    while (true) {
      if (i >= src_.size()) Error("unexpected char " + PyReprString(std::string(1, q)), p);
      char c = src_[i];
      if (c == q) break;
      if (c != '\\') {
        out.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) Error("unexpected char " + PyReprString(std::string(1, q)), p);
      char d = src_[i + 1];
      i += 2;
      switch (d) {
        case '\n': break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x': case 'u': case 'U': {
          int len = d == 'x' ? 2 : d == 'u' ? 4 : 8;
          uint32_t v = 0;
          for (int k = 0; k < len; ++k) {
            int h = i + k < src_.size() ? Hex(src_[i + k]) : -1;
            if (h < 0) Error("invalid \\" + std::string(1, d) + " escape in string literal", p);
            v = v * 16 + static_cast<uint32_t>(h);
          }
          if (v > 0x10FFFF) Error("illegal Unicode character in string literal", p);
          i += static_cast<size_t>(len);
          AppendUtf8(v, &out);
          break;
        }
        case 'N': Error("\\N{...} escapes are not supported", p);
        default:
          if (d >= '0' && d <= '7') {
            uint32_t v = static_cast<uint32_t>(d - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i)
              v = v * 8 + static_cast<uint32_t>(src_[i] - '0');
            AppendUtf8(v, &out);
          } else if (static_cast<unsigned char>(d) >= 0x80) {
            // Python backslashreplace quirk: "\é" becomes "\\xe9" before decoding.
            std::string one = DecodeOne(i - 1);
            std::vector<char32_t> cp = DecodeUtf8(one);
            char buf[16];
            uint32_t c32 = cp.empty() ? 0xFFFD : cp[0];
            if (c32 < 0x100) std::snprintf(buf, sizeof buf, "\\x%02x", c32);
            else if (c32 < 0x10000) std::snprintf(buf, sizeof buf, "\\u%04x", c32);
            else std::snprintf(buf, sizeof buf, "\\U%08x", c32);
            out += buf;
            i += one.size() - 1;
          } else {
            out.push_back('\\');
            out.push_back(d);
          }
      }
    }
    Emit(TokenType::kString, std::move(out), p);
    return i + 1;
  }

  std::string src_;
  LexerOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

// Jinja normalizes \r\n and \r to \n and drops one trailing newline.
std::string NormalizeNewlines(std::string_view s, bool keep_trailing) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      out.push_back(s[i]);
    }
  }
  if (!keep_trailing && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> Tokenize(std::string_view source, const LexerOptions& options) {
  Lexer lexer(NormalizeNewlines(source, options.keep_trailing_newline), options);
  return lexer.Run();
}

}  // namespace tessera::jinja
