// Incremental (streaming) detokenizer for one generation stream. Not
// thread-safe: one instance per request, fed from one thread; the Tokenizer
// it points to must outlive it.
//
// Guarantees:
//  - Text is released as soon as it is stable: it cannot change when more
//    tokens arrive. Held back: a trailing incomplete UTF-8 sequence (decoded
//    as U+FFFD until completed) and, when the tokenizer cleans up
//    tokenization spaces, a trailing " " / " n" / " '" ... that a later token
//    could rewrite.
//  - Released text is always valid UTF-8 and, without stop strings, the
//    concatenation of everything released (Step... + Finish) equals
//    Tokenizer::Decode(all ids, options).
//  - Stop strings match across token boundaries. The stream stops at the
//    stop string that completes first (earliest end; ties: earliest start);
//    the released text is exactly the full decode up to the start of that
//    match, and nothing after it is ever released. Text that could be the
//    start of a stop string is withheld until disambiguated.
// Cost: each Step decodes a short window of recent tokens (the window
// restarts whenever everything in it was released), so O(1) amortized per
// token for ordinary text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "text/tokenizer.h"

namespace tessera::text {

struct DetokenizerOptions {
  DecodeOptions decode;
  std::vector<std::string> stop;  // empty strings are ignored
};

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer* tokenizer, DetokenizerOptions options);

  // Adds one token; returns newly released text (possibly empty). After a
  // stop string matched, returns "" and ignores further tokens. Fails only on
  // an id outside the vocabulary (the token is then not added).
  StatusOr<std::string> Step(int32_t id);
  // End of stream: releases everything still held (incomplete UTF-8 becomes
  // U+FFFD exactly as in the full decode), still honouring stop strings.
  std::string Finish();

  bool stopped() const { return stopped_; }
  // The stop string that ended the stream, if any.
  const std::optional<std::string>& matched_stop() const { return matched_stop_; }
  const std::vector<int32_t>& ids() const { return ids_; }

 private:
  // Text of ids_[prefix_offset_ :] per the tokenizer.
  std::string DecodeWindow(size_t begin, size_t end) const;
  // Length of the prefix of `text` (from `from`) that cannot change later.
  size_t StableEnd(const std::string& text, size_t from, bool final) const;
  // clean_up_tokenization on raw stable text, holding back a tail that a
  // later character could still change.
  std::string CleanUp(std::string raw, bool final);
  // Runs stop-string matching on newly stable text; returns what to release.
  std::string Release(std::string stable, bool final);

  const Tokenizer* tokenizer_;
  DetokenizerOptions options_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // window start (token index)
  size_t read_offset_ = 0;    // tokens whose text fully precedes the pending part
  size_t emitted_in_window_ = 0;  // bytes of the window decode already made stable
  std::string raw_pending_;   // stable raw text awaiting clean-up
  std::string held_;          // stable text withheld as a possible stop prefix
  bool stopped_ = false;
  std::optional<std::string> matched_stop_;
};

}  // namespace tessera::text
