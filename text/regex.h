// PCRE2 (UTF + UCP, JIT) wrapper for tokenizer.json patterns. A compiled Regex
// is immutable and safe to share across threads; per-thread match data and JIT
// stacks live in thread_local storage. Matching is linear in the subject for
// the patterns real tokenizers ship (no per-call UTF re-validation: subjects
// must be valid UTF-8, which the tokenizer guarantees).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tessera::text {

class Regex {
 public:
  // Compiles `pattern` (HF/Oniguruma-flavoured) after rewriting \s, \S to the
  // oracle's whitespace set and ASCII-only (?i:...) groups to explicit classes.
  static StatusOr<std::shared_ptr<const Regex>> Compile(std::string_view pattern);
  // Compiles `literal` as an escaped literal pattern.
  static StatusOr<std::shared_ptr<const Regex>> CompileLiteral(std::string_view literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls fn(begin, end) for each non-overlapping match left to right; empty
  // matches are skipped (the scan advances one code point).
  void ForEachMatch(std::string_view subject, const std::function<void(size_t, size_t)>& fn) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// Exposed for tests: the rewriting Compile applies before handing to PCRE2.
std::string RewritePatternForPcre2(std::string_view pattern);

}  // namespace tessera::text
