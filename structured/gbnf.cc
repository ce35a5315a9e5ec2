#include "structured/gbnf.h"

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace tessera::structured {
namespace {

using Element = Grammar::Element;
using Kind = Grammar::Kind;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Parser {
 public:
  Parser(std::string_view src, const CompileLimits& limits, std::chrono::steady_clock::time_point deadline)
      : src_(src), b_(limits), deadline_(deadline) {}

  StatusOr<Grammar> Run() {
    if (src_.size() > b_.limits().max_source_bytes) {
      return InvalidArgument("the grammar is too long (over " + std::to_string(b_.limits().max_source_bytes) +
                             " bytes)");
    }
    SkipSpace(true);
    while (pos_ < src_.size()) {
      RETURN_IF_ERROR(ParseRule());
      SkipSpace(true);
    }
    for (const auto& [name, id] : named_) {
      if (!defined_.count(name)) return InvalidArgument("grammar rule '" + name + "' is used but not defined");
    }
    auto root = named_.find("root");
    if (root == named_.end()) return InvalidArgument("the grammar has no 'root' rule");
    return b_.Finish(root->second, deadline_);
  }

 private:
  Status Error(const std::string& what) const {
    int line = 1, col = 1;
    for (size_t i = 0; i < pos_ && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return InvalidArgument("grammar line " + std::to_string(line) + ", column " + std::to_string(col) + ": " + what);
  }
  bool Eof() const { return pos_ >= src_.size(); }
  char Peek(size_t ahead = 0) const { return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0'; }

  void SkipSpace(bool newline_ok) {
    while (!Eof()) {
      const char c = Peek();
      if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (c == '#') {
        while (!Eof() && Peek() != '\n' && Peek() != '\r') ++pos_;
      } else if (newline_ok && (c == '\n' || c == '\r')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string ParseName() {
    const size_t start = pos_;
    while (!Eof() && IsNameChar(Peek())) ++pos_;
    return std::string(src_.substr(start, pos_ - start));
  }

  int32_t RuleByName(const std::string& name) {
    auto [it, inserted] = named_.emplace(name, 0);
    if (inserted) it->second = b_.NewRule(name);
    return it->second;
  }

  Status ParseRule() {
    const std::string name = ParseName();
    if (name.empty()) return Error("expected a rule name");
    if (defined_.count(name)) return Error("rule '" + name + "' is defined twice");
    defined_.insert(name);
    SkipSpace(false);
    if (src_.substr(pos_, 3) != "::=") return Error("expected ::= after rule name '" + name + "'");
    pos_ += 3;
    SkipSpace(true);
    RETURN_IF_ERROR(ParseAlternates(RuleByName(name), false));
    SkipSpace(false);
    if (!Eof() && Peek() != '\n' && Peek() != '\r') return Error("expected the end of the line");
    return Status::Ok();
  }

  Status ParseAlternates(int32_t rule, bool nested) {
    if (++depth_ > 256) return Error("groups are nested too deeply");
    while (true) {
      std::vector<Element> seq;
      RETURN_IF_ERROR(ParseSequence(nested, &seq));
      RETURN_IF_ERROR(b_.AddAlt(rule, std::move(seq)));
      if (Peek() != '|') break;
      ++pos_;
      SkipSpace(true);
    }
    --depth_;
    return Status::Ok();
  }

  // One code point from a literal or class: an escape or a UTF-8 character.
  StatusOr<uint32_t> ParseChar() {
    if (Eof()) return Error("unexpected end of the grammar");
    const unsigned char c = static_cast<unsigned char>(Peek());
    if (c == '\\') {
      ++pos_;
      const char e = Peek();
      ++pos_;
      int digits = 0;
      switch (e) {
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 't': return uint32_t{'\t'};
        case 'n': return uint32_t{'\n'};
        case 'r': return uint32_t{'\r'};
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': return uint32_t(e);
        default: --pos_; return Error("unknown escape '\\" + std::string(1, e) + "'");
      }
      uint32_t v = 0;
      for (int i = 0; i < digits; ++i) {
        const int h = HexValue(Peek());
        if (h < 0) return Error("expected " + std::to_string(digits) + " hex digits");
        v = v * 16 + static_cast<uint32_t>(h);
        ++pos_;
      }
      if (v > 0x10FFFF) return Error("code point out of range");
      return v;
    }
    if (c < 0x80) {
      ++pos_;
      return uint32_t{c};
    }
    const int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (n == 0 || pos_ + n > src_.size() || c > 0xF4) return Error("invalid UTF-8");
    uint32_t v = c & (0x7F >> n);
    for (int i = 1; i < n; ++i) {
      const unsigned char d = static_cast<unsigned char>(src_[pos_ + i]);
      if ((d & 0xC0) != 0x80) return Error("invalid UTF-8");
      v = (v << 6) | (d & 0x3F);
    }
    pos_ += n;
    return v;
  }

  StatusOr<Element> ParseClass() {
    ++pos_;  // [
    const bool negate = Peek() == '^';
    if (negate) ++pos_;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (Peek() != ']') {
      if (Eof()) return Error("unterminated character class");
      ASSIGN_OR_RETURN(uint32_t lo, ParseChar());
      uint32_t hi = lo;
      if (Peek() == '-' && Peek(1) != ']' && pos_ + 1 < src_.size()) {
        ++pos_;
        ASSIGN_OR_RETURN(hi, ParseChar());
        if (hi < lo) return Error("character range out of order");
      }
      ranges.push_back({lo, hi});
    }
    ++pos_;  // ]
    return b_.CodePointClass(NormalizeRanges(std::move(ranges), negate));
  }

  Status ParseInt(int* out) {
    const size_t start = pos_;
    int64_t v = 0;
    while (!Eof() && Peek() >= '0' && Peek() <= '9') {
      v = v * 10 + (Peek() - '0');
      if (v > b_.limits().max_repeat) return Error("repetition count over " + std::to_string(b_.limits().max_repeat));
      ++pos_;
    }
    if (pos_ == start) return Error("expected a number");
    *out = static_cast<int>(v);
    return Status::Ok();
  }

  // Replaces seq[start:] by that symbol repeated {min, max} (max -1: unbounded).
  Status Repeat(std::vector<Element>* seq, size_t start, int min, int max) {
    std::vector<Element> sym(seq->begin() + static_cast<std::ptrdiff_t>(start), seq->end());
    seq->resize(start);
    Element x;
    if (sym.size() == 1) {
      x = sym[0];
    } else {
      const int32_t r = b_.NewRule("group");
      RETURN_IF_ERROR(b_.AddAlt(r, std::move(sym)));
      x = {Kind::kRule, r};
    }
    for (int i = 0; i < min; ++i) seq->push_back(x);
    if (static_cast<int64_t>(seq->size()) > b_.limits().max_elements) return Error("the grammar is too large");
    if (max < 0) {
      const int32_t star = b_.NewRule("star");
      RETURN_IF_ERROR(b_.AddAlt(star, {x, {Kind::kRule, star}}));
      RETURN_IF_ERROR(b_.AddAlt(star, {}));
      seq->push_back({Kind::kRule, star});
    } else if (max > min) {
      // (x (x (x)?)?)? : one parse per string, unlike x? x? x?.
      Element prev{Kind::kEnd, 0};
      for (int k = 0; k < max - min; ++k) {
        const int32_t opt = b_.NewRule("opt");
        if (prev.kind == Kind::kEnd) {
          RETURN_IF_ERROR(b_.AddAlt(opt, {x}));
        } else {
          RETURN_IF_ERROR(b_.AddAlt(opt, {x, prev}));
        }
        RETURN_IF_ERROR(b_.AddAlt(opt, {}));
        prev = {Kind::kRule, opt};
      }
      seq->push_back(prev);
    }
    return Status::Ok();
  }

  Status ParseSequence(bool nested, std::vector<Element>* seq) {
    size_t last = std::string::npos;
    while (!Eof()) {
      if (std::chrono::steady_clock::now() > deadline_) return InvalidArgument("the grammar took too long to compile");
      const char c = Peek();
      if (c == '"') {
        ++pos_;
        last = seq->size();
        std::string bytes;
        while (Peek() != '"') {
          if (Eof() || Peek() == '\n') return Error("unterminated string literal");
          if (Peek() == '\\') {
            ASSIGN_OR_RETURN(uint32_t cp, ParseChar());
            AppendUtf8(cp, &bytes);
          } else {
            bytes.push_back(Peek());
            ++pos_;
          }
        }
        ++pos_;
        for (unsigned char ch : bytes) {
          ByteSet s{};
          ByteSetAdd(&s, ch, ch);
          seq->push_back(b_.Class(s));
        }
        if (seq->size() == last && bytes.empty()) last = std::string::npos;  // "" : nothing to repeat
      } else if (c == '[') {
        last = seq->size();
        ASSIGN_OR_RETURN(Element e, ParseClass());
        seq->push_back(e);
      } else if (c == '.') {
        ++pos_;
        last = seq->size();
        ASSIGN_OR_RETURN(Element e, b_.CodePointClass({{0, 0x10FFFF}}));
        seq->push_back(e);
      } else if (IsNameChar(c)) {
        const size_t save = pos_;
        const std::string name = ParseName();
        SkipSpace(nested);
        if (src_.substr(pos_, 3) == "::=") {  // the next rule starts: this sequence ended at a newline
          pos_ = save;
          break;
        }
        pos_ = save + name.size();
        last = seq->size();
        seq->push_back({Kind::kRule, RuleByName(name)});
      } else if (c == '(') {
        ++pos_;
        SkipSpace(true);
        const int32_t sub = b_.NewRule("group");
        RETURN_IF_ERROR(ParseAlternates(sub, true));
        if (Peek() != ')') return Error("expected )");
        ++pos_;
        last = seq->size();
        seq->push_back({Kind::kRule, sub});
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (last == std::string::npos) return Error(std::string("'") + c + "' must follow something to repeat");
        ++pos_;
        int min = 0, max = -1;
        if (c == '+') min = 1;
        if (c == '?') max = 1;
        if (c == '{') {
          SkipSpace(true);
          RETURN_IF_ERROR(ParseInt(&min));
          SkipSpace(true);
          max = min;
          if (Peek() == ',') {
            ++pos_;
            SkipSpace(true);
            max = -1;
            if (Peek() != '}') RETURN_IF_ERROR(ParseInt(&max));
            SkipSpace(true);
          }
          if (Peek() != '}') return Error("expected }");
          ++pos_;
          if (max >= 0 && max < min) return Error("repetition {m,n} with n < m");
        }
        RETURN_IF_ERROR(Repeat(seq, last, min, max));
        last = std::string::npos;
      } else if (c == '<') {
        return Error("token references <...> are not supported");
      } else {
        break;
      }
      SkipSpace(nested);
    }
    return Status::Ok();
  }

  std::string_view src_;
  size_t pos_ = 0;
  int depth_ = 0;
  GrammarBuilder b_;
  std::chrono::steady_clock::time_point deadline_;
  std::map<std::string, int32_t> named_;
  std::set<std::string> defined_;
};

}  // namespace

StatusOr<Grammar> ParseGbnf(std::string_view text, const CompileLimits& limits,
                            std::chrono::steady_clock::time_point deadline) {
  Parser p(text, limits, deadline);
  return p.Run();
}

std::string GbnfLiteral(std::string_view bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);  // UTF-8 passes through as bytes of the literal
    }
  }
  return out + "\"";
}

}  // namespace tessera::structured
