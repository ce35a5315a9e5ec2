// Added tokens (tokenizer.json "added_tokens"): found in the input before
// normalization with a byte trie, leftmost-longest (the same rule as HF's
// Aho-Corasick and the transformers.js splitter), honouring lstrip/rstrip
// (whitespace next to the token is absorbed) and single_word (only matches
// not touching word characters). Immutable after construction; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::text {

// A byte range [begin, end) of a text.
struct TextSpan {
  size_t begin = 0;
  size_t end = 0;
};

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `tokens` is copied; empty contents are ignored.
  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  struct Piece {
    std::string_view text;  // a slice of the input (for plain text pieces)
    int32_t token = -1;     // index into tokens() for added-token pieces, else -1
  };
  // Splits `text` into plain pieces and added-token pieces, in order. Plain
  // pieces may be empty after stripping and are then omitted. A special token
  // whose bytes touch one of `plain_spans` (sorted, disjoint) is not
  // recognized there: that text stays plain, as with HF's
  // split_special_tokens; non-special added tokens are found everywhere.
  std::vector<Piece> Split(std::string_view text, std::span<const TextSpan> plain_spans = {}) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token = -1;
  };
  int32_t Child(int32_t node, uint8_t b) const;
  // Longest match starting at `pos`: returns token index or -1, sets *len.
  // `no_special_before`: special tokens ending after this offset are skipped.
  int32_t LongestAt(std::string_view text, size_t pos, size_t no_special_before, size_t* len) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
};

}  // namespace tessera::text
