// tokenizer.json normalizers: NFC/NFD/NFKC/NFKD, Lowercase, Prepend, Replace,
// Strip, Sequence. Immutable after construction; safe to share across threads.
// Input and output are valid UTF-8.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"
#include "text/json_util.h"

namespace tessera::text {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string Normalize(std::string_view text) const = 0;
};

// Builds a normalizer from its JSON (non-null). `path` names it in errors.
StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const Json& j, const std::string& path);

// Replaces every match of `pattern` (literal or regex) in `text` with `content`.
class Regex;
std::string ReplaceAll(std::string_view text, const std::string& literal, const Regex* regex,
                       const std::string& content);

// The fields of a "Replace" component (normalizer or decoder): a literal
// (`regex` null) or a compiled regex (`literal` empty), and the replacement.
struct ReplaceSpec {
  std::string literal;
  std::shared_ptr<const Regex> regex;
  std::string content;
};
StatusOr<ReplaceSpec> ParseReplace(const Json& j, const std::string& path);

}  // namespace tessera::text
