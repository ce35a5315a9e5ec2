// tokenizer.json pre-tokenizers: Split (PCRE2 regex or literal, all five
// behaviors, invert), ByteLevel, Digits, Metaspace, Sequence. Immutable after
// construction and safe to share across threads. Pieces are valid UTF-8,
// except that ByteLevel outputs its own printable byte alphabet.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "text/json_util.h"

namespace tessera::text {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits each piece of *pieces further (in place). `first_section` is true
  // when the text starts at the beginning of the input (Metaspace "first").
  virtual void PreTokenize(std::vector<std::string>* pieces, bool first_section) const = 0;
};

StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const Json& j, const std::string& path);

}  // namespace tessera::text
