#include "structured/regex.h"

#include <cstdio>
#include <utility>
#include <vector>

#include "structured/gbnf.h"

namespace tessera::structured {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

// Any JSON string character, escapes included (no \u surrogates, so every
// escape is one code point for length counting).
constexpr const char* kJsonChar =
    "([^\"\\\\\\x00-\\x1F\\x7F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] "
    "[0-9a-fA-F]{2})))";

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string ClassText(const Ranges& ranges) {
  std::string out = "[";
  char buf[32];
  for (auto [lo, hi] : ranges) {
    std::snprintf(buf, sizeof buf, "\\U%08X", lo);
    out += buf;
    if (hi > lo) {
      std::snprintf(buf, sizeof buf, "-\\U%08X", hi);
      out += buf;
    }
  }
  return out + "]";
}

class RegexConverter {
 public:
  RegexConverter(std::string_view p, const CompileLimits& limits, const RegexOptions& o)
      : p_(p), limits_(limits), o_(o) {}

  StatusOr<std::string> Run() {
    if (p_.size() > static_cast<size_t>(limits_.max_regex_bytes)) {
      return InvalidArgument("the regular expression is too long (over " + std::to_string(limits_.max_regex_bytes) +
                             " bytes)");
    }
    bool anchored_start = false, anchored_end = false;
    if (!p_.empty() && p_.front() == '^') {
      anchored_start = true;
      p_.remove_prefix(1);
    }
    if (!p_.empty() && p_.back() == '$' && (p_.size() < 2 || p_[p_.size() - 2] != '\\')) {
      anchored_end = true;
      p_.remove_suffix(1);
    }
    ASSIGN_OR_RETURN(std::string body, ParseAlt());
    if (pos_ < p_.size()) return Error("unbalanced ')'");
    if (!o_.search) return body;
    std::string out;
    if (!anchored_start) out += std::string(kJsonChar) + "* ";
    out += body;
    if (!anchored_end) out += std::string(" ") + kJsonChar + "*";
    return "(" + out + ")";
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgument("regular expression at offset " + std::to_string(pos_) + ": " + what);
  }
  bool Eof() const { return pos_ >= p_.size(); }
  char Peek() const { return pos_ < p_.size() ? p_[pos_] : '\0'; }

  StatusOr<std::string> ParseAlt() {
    if (++depth_ > 64) return Error("groups nested too deeply");
    std::string out;
    int n = 0;
    while (true) {
      ASSIGN_OR_RETURN(std::string seq, ParseConcat());
      out += (n++ ? " | " : "") + (seq.empty() ? std::string("\"\"") : seq);
      if (Peek() != '|') break;
      ++pos_;
    }
    --depth_;
    return n > 1 ? "(" + out + ")" : out;
  }

  StatusOr<std::string> ParseConcat() {
    std::string out;
    while (!Eof() && Peek() != '|' && Peek() != ')') {
      ASSIGN_OR_RETURN(std::string atom, ParseAtom());
      ASSIGN_OR_RETURN(std::string quant, ParseQuantifier());
      if (!quant.empty()) atom = "(" + atom + ")" + quant;
      if (!out.empty()) out += ' ';
      out += atom;
    }
    return out;
  }

  Status ParseCount(int* out) {
    const size_t start = pos_;
    int64_t v = 0;
    while (!Eof() && Peek() >= '0' && Peek() <= '9') {
      v = v * 10 + (Peek() - '0');
      if (v > limits_.max_repeat) return Error("repetition count over " + std::to_string(limits_.max_repeat));
      ++pos_;
    }
    if (pos_ == start) return Error("expected a number in {}");
    *out = static_cast<int>(v);
    return Status::Ok();
  }

  StatusOr<std::string> ParseQuantifier() {
    std::string q;
    const char c = Peek();
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      q = std::string(1, c);
    } else if (c == '{') {
      ++pos_;
      int min = 0, max = 0;
      RETURN_IF_ERROR(ParseCount(&min));
      q = "{" + std::to_string(min);
      if (Peek() == ',') {
        ++pos_;
        q += ",";
        if (Peek() != '}') {
          RETURN_IF_ERROR(ParseCount(&max));
          if (max < min) return Error("{m,n} with n < m");
          q += std::to_string(max);
        }
      }
      if (Peek() != '}') return Error("expected }");
      ++pos_;
      q += "}";
    } else {
      return q;
    }
    if (Peek() == '?') ++pos_;  // lazy: same language
    if (Peek() == '+') return Error("possessive quantifiers are not supported");
    if (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{') return Error("nested quantifier");
    return q;
  }

  // The text of one code point as a GBNF literal (JSON-escaped in json_string mode).
  std::string Literal(uint32_t cp) const {
    std::string bytes;
    if (o_.json_string && (cp == '"' || cp == '\\')) {
      bytes = {'\\', static_cast<char>(cp)};
    } else if (o_.json_string && cp < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      bytes = buf;
    } else {
      AppendUtf8(cp, &bytes);
    }
    return GbnfLiteral(bytes);
  }

  // A set of code points as a class; JSON mode drops characters that cannot
  // appear raw in a JSON string.
  std::string Class(Ranges ranges) const {
    ranges = NormalizeRanges(std::move(ranges), false);
    if (o_.json_string) {
      Ranges keep = NormalizeRanges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}, {0xD800, 0xDFFF}}, true);
      Ranges out;
      for (auto [a, b] : ranges) {
        for (auto [c, d] : keep) {
          const uint32_t lo = std::max(a, c), hi = std::min(b, d);
          if (lo <= hi) out.push_back({lo, hi});
        }
      }
      ranges = std::move(out);
    }
    return ClassText(ranges);
  }

  // \d \w \s and their negations (ASCII complements: see regex.h).
  static bool Shorthand(char c, Ranges* r, bool* negated) {
    *negated = c == 'D' || c == 'W' || c == 'S';
    Ranges base;
    switch (c) {
      case 'd': case 'D': base = {{'0', '9'}}; break;
      case 'w': case 'W': base = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; break;
      case 's': case 'S': base = {{'\t', '\r'}, {' ', ' '}}; break;
      default: return false;
    }
    if (*negated) {
      Ranges all = NormalizeRanges(base, true);
      for (auto [lo, hi] : all) {
        if (lo < 0x80) r->push_back({lo, std::min<uint32_t>(hi, 0x7F)});
      }
    } else {
      r->insert(r->end(), base.begin(), base.end());
    }
    return true;
  }

  // After a backslash (outside or inside a class): one code point, or a shorthand class.
  StatusOr<uint32_t> ParseEscapeChar(char e) {
    switch (e) {
      case 'n': return uint32_t{'\n'};
      case 't': return uint32_t{'\t'};
      case 'r': return uint32_t{'\r'};
      case 'f': return uint32_t{'\f'};
      case 'v': return uint32_t{'\v'};
      case '0': return uint32_t{0};
      case 'x': case 'u': {
        const int n = e == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int i = 0; i < n; ++i) {
          const int h = Hex(Peek());
          if (h < 0) return Error(std::string("\\") + e + " needs " + std::to_string(n) + " hex digits");
          v = v * 16 + static_cast<uint32_t>(h);
          ++pos_;
        }
        if (v >= 0xD800 && v <= 0xDFFF) return Error("surrogate code points are not supported");
        return v;
      }
      default: break;
    }
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
      return Error(std::string("\\") + e + " is not supported");
    }
    return static_cast<uint32_t>(static_cast<unsigned char>(e));
  }

  StatusOr<uint32_t> ParseUtf8() {
    const unsigned char c = static_cast<unsigned char>(Peek());
    if (c < 0x80) {
      ++pos_;
      return uint32_t{c};
    }
    const int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (n == 0 || c > 0xF4 || pos_ + n > p_.size()) return Error("invalid UTF-8");
    uint32_t v = c & (0x7F >> n);
    for (int i = 1; i < n; ++i) {
      const unsigned char d = static_cast<unsigned char>(p_[pos_ + i]);
      if ((d & 0xC0) != 0x80) return Error("invalid UTF-8");
      v = (v << 6) | (d & 0x3F);
    }
    pos_ += n;
    return v;
  }

  StatusOr<std::string> ParseClassAtom() {
    ++pos_;  // [
    const bool negate = Peek() == '^';
    if (negate) ++pos_;
    Ranges r;
    bool has_shorthand = false;
    bool first = true;
    while (Eof() || Peek() != ']' || first) {
      if (Eof()) return Error("unterminated [");
      if (Peek() == '[' && pos_ + 1 < p_.size() && p_[pos_ + 1] == ':') return Error("POSIX classes are not supported");
      first = false;
      uint32_t lo;
      if (Peek() == '\\') {
        ++pos_;
        if (Eof()) return Error("trailing \\");
        const char e = Peek();
        ++pos_;
        bool neg = false;
        if (Shorthand(e, &r, &neg)) {
          has_shorthand = true;
          continue;
        }
        if (e == 'b') {
          lo = '\b';
        } else {
          ASSIGN_OR_RETURN(lo, ParseEscapeChar(e));
        }
      } else {
        ASSIGN_OR_RETURN(lo, ParseUtf8());
      }
      uint32_t hi = lo;
      if (Peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        if (Peek() == '\\') {
          ++pos_;
          if (Eof()) return Error("trailing \\");
          const char e = Peek();
          ++pos_;
          ASSIGN_OR_RETURN(hi, ParseEscapeChar(e));
        } else {
          ASSIGN_OR_RETURN(hi, ParseUtf8());
        }
        if (hi < lo) return Error("class range out of order");
      }
      r.push_back({lo, hi});
    }
    ++pos_;  // ]
    if (negate) {
      r = NormalizeRanges(std::move(r), true);
      if (has_shorthand) {  // Python's \d \w \s are Unicode: stay inside ASCII
        Ranges ascii;
        for (auto [lo, hi] : r) {
          if (lo < 0x80) ascii.push_back({lo, std::min<uint32_t>(hi, 0x7F)});
        }
        r = std::move(ascii);
      }
    }
    return Class(std::move(r));
  }

  StatusOr<std::string> ParseAtom() {
    const char c = Peek();
    switch (c) {
      case '(': {
        ++pos_;
        if (Peek() == '?') {
          ++pos_;
          if (Peek() == ':') {
            ++pos_;
          } else if (Peek() == 'P' && pos_ + 1 < p_.size() && p_[pos_ + 1] == '<') {
            pos_ += 2;
            while (!Eof() && Peek() != '>') ++pos_;
            ++pos_;
          } else if (Peek() == '<' && pos_ + 1 < p_.size() && p_[pos_ + 1] != '=' && p_[pos_ + 1] != '!') {
            ++pos_;
            while (!Eof() && Peek() != '>') ++pos_;
            ++pos_;
          } else {
            return Error("(?" + std::string(1, Peek()) + " (lookaround, flags) is not supported");
          }
        }
        ASSIGN_OR_RETURN(std::string inner, ParseAlt());
        if (Peek() != ')') return Error("missing )");
        ++pos_;
        return "(" + (inner.empty() ? std::string("\"\"") : inner) + ")";
      }
      case '[':
        return ParseClassAtom();
      case '.':
        ++pos_;
        return Class(NormalizeRanges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true));
      case '\\': {
        ++pos_;
        if (Eof()) return Error("trailing \\");
        const char e = Peek();
        ++pos_;
        Ranges r;
        bool neg = false;
        if (Shorthand(e, &r, &neg)) return Class(std::move(r));
        ASSIGN_OR_RETURN(uint32_t cp, ParseEscapeChar(e));
        return Literal(cp);
      }
      case '^': case '$':
        return Error(std::string("anchor '") + c + "' is only supported at the start/end");
      case '*': case '+': case '?': case '{':
        return Error(std::string("'") + c + "' has nothing to repeat");
      default: {
        ASSIGN_OR_RETURN(uint32_t cp, ParseUtf8());
        return Literal(cp);
      }
    }
  }

  std::string_view p_;
  size_t pos_ = 0;
  int depth_ = 0;
  const CompileLimits& limits_;
  RegexOptions o_;
};

}  // namespace

StatusOr<std::string> RegexToGbnf(std::string_view pattern, const CompileLimits& limits, const RegexOptions& options) {
  RegexConverter c(pattern, limits, options);
  return c.Run();
}

}  // namespace tessera::structured
