// Grammar: the one representation every structured-output source compiles to
// (JSON Schema, regex and choice lists go through GBNF text; see gbnf.h). A
// byte-level context-free grammar: each rule is a list of alternatives, each
// alternative a sequence of elements ending in kEnd, and each terminal is a
// set of BYTES (code-point classes are lowered to UTF-8 byte sequences), so
// a token that ends inside a multi-byte character is matched exactly.
//
// Invariants after Validate(): every referenced rule exists, no rule is left
// recursive (directly, or through nullable prefixes), and the root derives at
// least one string (else the grammar is unsatisfiable). GrammarBuilder::Finish
// also drops every alternative that derives no string, so every stack a
// matcher builds can be completed. Immutable once built;
// safe to share between threads.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::structured {

// Bounds on what a client may make us compile (each over-limit input is an
// INVALID_ARGUMENT naming the bound, which the server turns into a 400).
struct CompileLimits {
  size_t max_source_bytes = 64 << 10;  // schema (serialized), regex or GBNF text
  int max_schema_depth = 32;           // nested schemas
  int max_rules = 8192;
  int max_elements = 1 << 18;  // grammar elements after expanding repetitions
  int max_repeat = 1000;       // m and n of {m,n}
  int max_regex_bytes = 4096;  // one regular expression (also JSON Schema `pattern`)
  std::chrono::milliseconds max_compile_time{2000};
  // Per-step work (docs/architecture.md, "Time-bounded steps"): one next-token
  // mask or one token's advance may take at most this long and build states of
  // at most this many stacks; a grammar whose probe at compile time exceeds
  // either is refused, and a request that exceeds either mid-generation fails.
  std::chrono::milliseconds max_mask_time{250};
  size_t max_stacks = 1024;
  // The compile-time probe (StructuredOutputs): walks toward the grammar's
  // most ambiguous states within this much time.
  std::chrono::milliseconds max_probe_time{500};
};

using ByteSet = std::array<uint64_t, 4>;

inline bool ByteSetHas(const ByteSet& s, uint8_t b) { return (s[b >> 6] >> (b & 63)) & 1; }
inline void ByteSetAdd(ByteSet* s, uint8_t lo, uint8_t hi) {
  for (int b = lo; b <= hi; ++b) (*s)[b >> 6] |= uint64_t{1} << (b & 63);
}

struct Grammar {
  enum class Kind : uint8_t { kClass, kRule, kEnd };
  struct Element {
    Kind kind = Kind::kEnd;
    int32_t arg = 0;  // kClass: index into classes; kRule: rule id
  };
  std::vector<Element> elems;              // every alternative, back to back, each ending in kEnd
  std::vector<std::vector<int32_t>> alts;  // rule id -> positions in elems where its alternatives start
  std::vector<std::string> names;          // rule id -> name (diagnostics, ToGbnf)
  std::vector<ByteSet> classes;
  int32_t root = -1;

  // Checks the invariants above; INVALID_ARGUMENT saying which rule fails.
  Status Validate(std::chrono::steady_clock::time_point deadline) const;
  // A readable dump in GBNF syntax (byte classes as \xHH ranges); for tests and logs.
  std::string ToGbnf() const;
};

// Builds a Grammar rule by rule. Not thread-safe.
class GrammarBuilder {
 public:
  explicit GrammarBuilder(const CompileLimits& limits) : limits_(limits) {}

  int32_t NewRule(std::string name);  // a fresh rule (names need not be unique)
  // Adds an alternative (without its kEnd) to `rule`. Fails past max_elements.
  Status AddAlt(int32_t rule, std::vector<Grammar::Element> seq);
  // The element matching one byte in `set` (classes are deduplicated).
  Grammar::Element Class(const ByteSet& set);
  // Elements matching one code point in the sorted, merged [lo, hi] ranges:
  // one class element when every range is ASCII, else a reference to a
  // (cached) rule whose alternatives are the UTF-8 byte sequences.
  StatusOr<Grammar::Element> CodePointClass(const std::vector<std::pair<uint32_t, uint32_t>>& ranges);
  int num_rules() const { return static_cast<int>(rules_.size()); }
  const CompileLimits& limits() const { return limits_; }

  // Flattens into a Grammar with `root` and validates it.
  StatusOr<Grammar> Finish(int32_t root, std::chrono::steady_clock::time_point deadline);

 private:
  CompileLimits limits_;
  std::vector<std::vector<std::vector<Grammar::Element>>> rules_;
  std::vector<std::string> names_;
  std::vector<ByteSet> classes_;
  int64_t num_elements_ = 0;
  std::vector<std::pair<std::string, Grammar::Element>> class_rules_;  // key -> element (small; linear search)
};

// Appends the UTF-8 encoding of code point `cp` (<= 0x10FFFF) to `out`.
void AppendUtf8(uint32_t cp, std::string* out);

// Sorts and merges code-point ranges; with `negate`, returns the complement in [0, 0x10FFFF].
std::vector<std::pair<uint32_t, uint32_t>> NormalizeRanges(std::vector<std::pair<uint32_t, uint32_t>> ranges,
                                                           bool negate);

// The UTF-8 byte-range sequences matching exactly the code points in
// [lo, hi] (surrogates excluded); each sequence is a list of per-byte ranges.
std::vector<std::vector<std::pair<uint8_t, uint8_t>>> Utf8Sequences(uint32_t lo, uint32_t hi);

}  // namespace tessera::structured
