#include "text/normalizers.h"

#include <vector>

#include "text/regex.h"
#include "text/utf8.h"

namespace tessera::text {

std::string ReplaceAll(std::string_view text, const std::string& literal, const Regex* regex,
                       const std::string& content) {
  std::string out;
  out.reserve(text.size());
  size_t prev = 0;
  if (regex != nullptr) {
    regex->ForEachMatch(text, [&](size_t b, size_t e) {
      out.append(text.substr(prev, b - prev));
      out += content;
      prev = e;
    });
  } else if (!literal.empty()) {
    for (size_t pos = text.find(literal); pos != std::string_view::npos; pos = text.find(literal, prev)) {
      out.append(text.substr(prev, pos - prev));
      out += content;
      prev = pos + literal.size();
    }
  }
  out.append(text.substr(prev));
  return out;
}

namespace {

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  std::string Normalize(std::string_view text) const override { return text::Normalize(text, form_); }

 private:
  NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  std::string Normalize(std::string_view text) const override { return Lowercase(text); }
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  std::string Normalize(std::string_view text) const override {
    if (text.empty()) return std::string();
    return prepend_ + std::string(text);
  }

 private:
  std::string prepend_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::shared_ptr<const Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  std::string Normalize(std::string_view text) const override {
    return ReplaceAll(text, literal_, regex_.get(), content_);
  }

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;
  std::string content_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string Normalize(std::string_view text) const override {
    if (left_) text = TrimJsWhitespaceLeft(text);
    if (right_) text = TrimJsWhitespaceRight(text);
    return std::string(text);
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string Normalize(std::string_view text) const override {
    std::string s(text);
    for (const auto& p : parts_) s = p->Normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

StatusOr<ReplaceSpec> ParseReplace(const Json& j, const std::string& path) {
  ASSIGN_OR_RETURN(PatternSpec pattern, GetPattern(j, path));
  ReplaceSpec r;
  RETURN_IF_ERROR(GetString(j, path, "content", &r.content, true));
  if (pattern.is_regex) {
    auto re = Regex::Compile(pattern.text);
    if (!re.ok()) return InvalidArgument(path + ".pattern: " + re.status().message());
    r.regex = *re;
  } else {
    r.literal = std::move(pattern.text);
  }
  return r;
}

StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const Json& j, const std::string& path) {
  ASSIGN_OR_RETURN(std::string type, GetType(j, path));
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfc));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfd));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfkc));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNfkd));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "Prepend") {
    std::string prepend;
    RETURN_IF_ERROR(GetString(j, path, "prepend", &prepend, true));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(std::move(prepend)));
  }
  if (type == "Replace") {
    ASSIGN_OR_RETURN(ReplaceSpec r, ParseReplace(j, path));
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(r.literal, r.regex, std::move(r.content)));
  }
  if (type == "Strip") {
    bool left = true, right = true;
    RETURN_IF_ERROR(GetBool(j, path, "strip_left", &left));
    RETURN_IF_ERROR(GetBool(j, path, "strip_right", &right));
    return std::unique_ptr<Normalizer>(new StripNormalizer(left, right));
  }
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(auto parts, ParseParts<Normalizer>(j, path, "normalizers", ParseNormalizer));
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  return Unsupported(path, type);
}

}  // namespace tessera::text
