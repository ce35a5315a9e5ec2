#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/uchar.h>

#include <cstdio>
#include <map>
#include <mutex>

#include "text/utf8.h"

namespace tessera::text {
namespace {

// Per-thread PCRE2 scratch: a JIT stack (grown on demand up to 64 MiB) and
// match data big enough for the ovector we read (group 0 only).
struct MatchScratch {
  pcre2_jit_stack* jit_stack = nullptr;
  pcre2_match_context* mctx = nullptr;
  pcre2_match_data* md = nullptr;
  MatchScratch() {
    jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
    mctx = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(mctx, nullptr, jit_stack);
    md = pcre2_match_data_create(1, nullptr);
  }
  ~MatchScratch() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(mctx);
    pcre2_jit_stack_free(jit_stack);
  }
};

MatchScratch& Scratch() {
  thread_local MatchScratch scratch;
  return scratch;
}

bool IsAsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Two-letter general category ("Lu", "Po", ...) of an ICU category value.
const char* CategoryCode(int8_t t) {
  switch (t) {
    case U_UPPERCASE_LETTER: return "Lu";
    case U_LOWERCASE_LETTER: return "Ll";
    case U_TITLECASE_LETTER: return "Lt";
    case U_MODIFIER_LETTER: return "Lm";
    case U_OTHER_LETTER: return "Lo";
    case U_NON_SPACING_MARK: return "Mn";
    case U_ENCLOSING_MARK: return "Me";
    case U_COMBINING_SPACING_MARK: return "Mc";
    case U_DECIMAL_DIGIT_NUMBER: return "Nd";
    case U_LETTER_NUMBER: return "Nl";
    case U_OTHER_NUMBER: return "No";
    case U_SPACE_SEPARATOR: return "Zs";
    case U_LINE_SEPARATOR: return "Zl";
    case U_PARAGRAPH_SEPARATOR: return "Zp";
    case U_CONTROL_CHAR: return "Cc";
    case U_FORMAT_CHAR: return "Cf";
    case U_PRIVATE_USE_CHAR: return "Co";
    case U_SURROGATE: return "Cs";
    case U_DASH_PUNCTUATION: return "Pd";
    case U_START_PUNCTUATION: return "Ps";
    case U_END_PUNCTUATION: return "Pe";
    case U_CONNECTOR_PUNCTUATION: return "Pc";
    case U_OTHER_PUNCTUATION: return "Po";
    case U_MATH_SYMBOL: return "Sm";
    case U_CURRENCY_SYMBOL: return "Sc";
    case U_MODIFIER_SYMBOL: return "Sk";
    case U_OTHER_SYMBOL: return "So";
    case U_INITIAL_PUNCTUATION: return "Pi";
    case U_FINAL_PUNCTUATION: return "Pf";
    default: return "Cn";
  }
}

// Debian's PCRE2 10.42 knows Unicode 14; tokenizers are specified against newer
// tables (the oracle, V8/ICU, uses Unicode 15), e.g. U+1FABF is \p{So} there.
// For a category name like "P" or "Lu", this returns a class fragment listing
// the code points ICU assigns to it that are newer than PCRE2's Unicode
// version, so \p{X} matches them too. Empty once PCRE2 catches up. Computed
// once per category (a scan of all code points, ~20 ms) and cached.
const std::string& NewerCodePoints(const std::string& category) {
  static std::mutex mu;
  static std::map<std::string, std::string> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(category);
  if (it != cache.end()) return it->second;
  int major = 0, minor = 0;
  char version[32] = {0};
  if (pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, version) > 0) std::sscanf(version, "%d.%d", &major, &minor);
  std::string frag;
  auto add = [&frag](UChar32 lo, UChar32 hi) {
    char buf[48];
    if (lo == hi) {
      std::snprintf(buf, sizeof(buf), "\\x{%X}", static_cast<unsigned>(lo));
    } else {
      std::snprintf(buf, sizeof(buf), "\\x{%X}-\\x{%X}", static_cast<unsigned>(lo), static_cast<unsigned>(hi));
    }
    frag += buf;
  };
  UChar32 run_start = -1, prev = -2;
  for (UChar32 c = 0; c <= 0x10FFFF; ++c) {
    const int8_t type = u_charType(c);
    bool newer = false;
    if (type != U_UNASSIGNED && std::string(CategoryCode(type)).rfind(category, 0) == 0) {
      UVersionInfo age;
      u_charAge(c, age);
      newer = age[0] > major || (age[0] == major && age[1] > minor);
    }
    if (newer) {
      if (prev != c - 1) {
        if (run_start >= 0) add(run_start, prev);
        run_start = c;
      }
      prev = c;
    }
  }
  if (run_start >= 0) add(run_start, prev);
  return cache.emplace(category, std::move(frag)).first->second;
}

// Reads "X" from "\p{X}" starting at p[i] == '\\'; empty if not that form.
std::string CategoryAt(std::string_view p, size_t i) {
  if (i + 3 >= p.size() || (p[i + 1] != 'p' && p[i + 1] != 'P') || p[i + 2] != '{') return "";
  const size_t close = p.find('}', i + 3);
  if (close == std::string_view::npos || close - (i + 3) > 2) return "";
  std::string cat(p.substr(i + 3, close - (i + 3)));
  if (cat.empty() || cat[0] < 'A' || cat[0] > 'Z') return "";
  return cat;
}

}  // namespace

std::string RewritePatternForPcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  int caseless_depth = 0;  // >0 inside a (?i: ... ) group being expanded
  int paren_depth = 0;
  std::vector<int> caseless_open;  // paren depths where (?i: groups opened
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') {
        if (in_class) {
          out += kJsWhitespaceClass;
        } else {
          out += "[";
          out += kJsWhitespaceClass;
          out += "]";
        }
      } else if (n == 'S' && !in_class) {
        out += "[^";
        out += kJsWhitespaceClass;
        out += "]";
      } else if (const std::string cat = CategoryAt(p, i);
                 !cat.empty() && !NewerCodePoints(cat).empty() && (n == 'p' || !in_class)) {
        // \p{X} -> [\p{X}<newer>] (or the fragment inside a class);
        // \P{X} outside a class -> [^\p{X}<newer>].
        const std::string body = "\\p{" + cat + "}" + NewerCodePoints(cat);
        if (in_class) {
          out += body;
        } else {
          out += (n == 'P' ? "[^" : "[") + body + "]";
        }
        i += 2 + cat.size() + 1;  // past "p{X}"
        continue;
      } else {
        out.push_back(c);
        out.push_back(n);
      }
      ++i;
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      out.push_back(c);
      continue;
    }
    if (c == '[') {
      in_class = true;
      out.push_back(c);
      // A leading ']' or '^]' is literal inside the class.
      if (i + 1 < p.size() && p[i + 1] == '^') { out.push_back('^'); ++i; }
      if (i + 1 < p.size() && p[i + 1] == ']') { out.push_back(']'); ++i; }
      continue;
    }
    if (c == '(') {
      ++paren_depth;
      if (p.substr(i, 4) == "(?i:") {
        caseless_open.push_back(paren_depth);
        ++caseless_depth;
        out += "(?:";
        i += 3;
        continue;
      }
    } else if (c == ')') {
      if (!caseless_open.empty() && caseless_open.back() == paren_depth) {
        caseless_open.pop_back();
        --caseless_depth;
      }
      --paren_depth;
    }
    if (caseless_depth > 0 && IsAsciiAlpha(c)) {
      // ASCII-only case folding, as the oracle does: 's' must not match U+017F.
      const char lower = static_cast<char>(c | 0x20), upper = static_cast<char>(c & ~0x20);
      out += '[';
      out.push_back(lower);
      out.push_back(upper);
      out += ']';
      continue;
    }
    out.push_back(c);
  }
  return out;
}

StatusOr<std::shared_ptr<const Regex>> Regex::Compile(std::string_view pattern) {
  const std::string rewritten = RewritePatternForPcre2(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &err, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    return InvalidArgument("regex '" + std::string(pattern) + "': " + reinterpret_cast<char*>(buf) +
                           " at offset " + std::to_string(offset));
  }
  // JIT is an optimization; the interpreter is used if it is unavailable.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  std::shared_ptr<Regex> re(new Regex());
  re->pattern_ = std::string(pattern);
  re->code_ = code;
  return std::shared_ptr<const Regex>(std::move(re));
}

StatusOr<std::shared_ptr<const Regex>> Regex::CompileLiteral(std::string_view literal) {
  std::string escaped;
  escaped.reserve(literal.size() + 4);
  escaped += "\\Q";
  // \Q...\E cannot contain "\E"; split it if present.
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal[i] == '\\' && i + 1 < literal.size() && literal[i + 1] == 'E') {
      escaped += "\\E\\\\\\QE";
      ++i;
    } else {
      escaped.push_back(literal[i]);
    }
  }
  escaped += "\\E";
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(escaped.data()), escaped.size(),
                                   PCRE2_UTF | PCRE2_NO_UTF_CHECK, &err, &offset, nullptr);
  if (code == nullptr) return InvalidArgument("literal pattern '" + std::string(literal) + "' does not compile");
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  std::shared_ptr<Regex> re(new Regex());
  re->pattern_ = std::string(literal);
  re->code_ = code;
  return std::shared_ptr<const Regex>(std::move(re));
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::ForEachMatch(std::string_view subject, const std::function<void(size_t, size_t)>& fn) const {
  MatchScratch& s = Scratch();
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* subj = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t start = 0;
  while (start <= subject.size()) {
    const int rc = pcre2_match(code, subj, subject.size(), start, PCRE2_NO_UTF_CHECK, s.md, s.mctx);
    if (rc < 0) break;  // no match (or a resource limit: treat the rest as unmatched)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.md);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      fn(b, e);
      start = e;
    } else {
      if (b >= subject.size()) break;
      start = b + Utf8SeqLen(static_cast<uint8_t>(subject[b]));
    }
  }
}

}  // namespace tessera::text
