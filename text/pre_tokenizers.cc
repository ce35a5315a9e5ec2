#include "text/pre_tokenizers.h"

#include <utility>

#include "text/byte_level.h"
#include "text/normalizers.h"
#include "text/regex.h"
#include "text/utf8.h"

namespace tessera::text {
namespace {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Segment {
  size_t begin, end;
  bool delimiter;
};

// Splits `s` into pieces per `behavior` given segments covering it in order.
void ApplyBehavior(std::string_view s, const std::vector<Segment>& segs, Behavior behavior,
                   std::vector<std::string>* out) {
  switch (behavior) {
    case Behavior::kRemoved:
      for (const Segment& g : segs) {
        if (!g.delimiter) out->emplace_back(s.substr(g.begin, g.end - g.begin));
      }
      return;
    case Behavior::kIsolated:
      for (const Segment& g : segs) out->emplace_back(s.substr(g.begin, g.end - g.begin));
      return;
    case Behavior::kContiguous:
      // Runs of adjacent delimiters become one piece.
      for (size_t i = 0; i < segs.size(); ++i) {
        const size_t begin = segs[i].begin;
        size_t end = segs[i].end;
        while (segs[i].delimiter && i + 1 < segs.size() && segs[i + 1].delimiter) end = segs[++i].end;
        out->emplace_back(s.substr(begin, end - begin));
      }
      return;
    case Behavior::kMergedWithPrevious: {
      bool prev_is_content = false;
      for (const Segment& g : segs) {
        if (g.delimiter && prev_is_content) {
          out->back().append(s.substr(g.begin, g.end - g.begin));
          prev_is_content = false;
        } else {
          out->emplace_back(s.substr(g.begin, g.end - g.begin));
          prev_is_content = !g.delimiter;
        }
      }
      return;
    }
    case Behavior::kMergedWithNext: {
      std::string pending;
      for (const Segment& g : segs) {
        if (g.delimiter) {
          if (!pending.empty()) out->push_back(std::move(pending));
          pending = std::string(s.substr(g.begin, g.end - g.begin));
        } else {
          out->push_back(pending + std::string(s.substr(g.begin, g.end - g.begin)));
          pending.clear();
        }
      }
      if (!pending.empty()) out->push_back(std::move(pending));
      return;
    }
  }
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::shared_ptr<const Regex> regex, std::string literal, Behavior behavior, bool invert)
      : regex_(std::move(regex)), literal_(std::move(literal)), behavior_(behavior), invert_(invert) {}

  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    std::vector<std::string> out;
    out.reserve(pieces->size() * 4);
    std::vector<Segment> segs;
    for (const std::string& piece : *pieces) {
      segs.clear();
      size_t prev = 0;
      auto on_match = [&](size_t b, size_t e) {
        if (b > prev) segs.push_back({prev, b, invert_});
        segs.push_back({b, e, !invert_});
        prev = e;
      };
      if (regex_) {
        regex_->ForEachMatch(piece, on_match);
      } else if (!literal_.empty()) {
        for (size_t pos = piece.find(literal_); pos != std::string::npos; pos = piece.find(literal_, prev)) {
          on_match(pos, pos + literal_.size());
        }
      }
      if (prev < piece.size()) segs.push_back({prev, piece.size(), invert_});
      ApplyBehavior(piece, segs, behavior_, &out);
    }
    *pieces = std::move(out);
  }

 private:
  std::shared_ptr<const Regex> regex_;
  std::string literal_;
  Behavior behavior_;
  bool invert_;
};

constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::shared_ptr<const Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}

  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    std::vector<std::string> out;
    out.reserve(pieces->size());
    for (std::string& piece : *pieces) {
      if (add_prefix_space_ && (piece.empty() || piece[0] != ' ')) piece.insert(piece.begin(), ' ');
      if (regex_) {
        regex_->ForEachMatch(piece, [&](size_t b, size_t e) {
          out.emplace_back();
          ByteLevelEncode(std::string_view(piece).substr(b, e - b), &out.back());
        });
      } else {
        out.emplace_back();
        ByteLevelEncode(piece, &out.back());
      }
    }
    *pieces = std::move(out);
  }

 private:
  bool add_prefix_space_;
  std::shared_ptr<const Regex> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}

  void PreTokenize(std::vector<std::string>* pieces, bool first_section) const override {
    std::vector<std::string> out;
    for (const std::string& piece : *pieces) {
      std::string s = ReplaceAll(piece, " ", nullptr, replacement_);
      const bool prepend = scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && first_section);
      if (prepend && s.rfind(replacement_, 0) != 0) s = replacement_ + s;
      if (!split_) {
        out.push_back(std::move(s));
        continue;
      }
      // Split before each replacement char (MergedWithNext).
      size_t start = 0;
      for (size_t pos = s.find(replacement_, 1); pos != std::string::npos; pos = s.find(replacement_, pos + 1)) {
        if (pos > start) out.push_back(s.substr(start, pos - start));
        start = pos;
      }
      if (start < s.size()) out.push_back(s.substr(start));
    }
    *pieces = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void PreTokenize(std::vector<std::string>* pieces, bool first_section) const override {
    for (const auto& p : parts_) p->PreTokenize(pieces, first_section);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

StatusOr<Behavior> ParseBehavior(const Json& j, const std::string& path) {
  std::string b = "Isolated";
  RETURN_IF_ERROR(GetString(j, path, "behavior", &b, false));
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  return InvalidArgument(path + ".behavior: unknown value '" + b + "'");
}

StatusOr<std::shared_ptr<const Regex>> CompileAt(const std::string& pattern, const std::string& path) {
  auto re = Regex::Compile(pattern);
  if (!re.ok()) return InvalidArgument(path + ": " + re.status().message());
  return *re;
}

}  // namespace

StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const Json& j, const std::string& path) {
  ASSIGN_OR_RETURN(std::string type, GetType(j, path));
  if (type == "Split") {
    ASSIGN_OR_RETURN(PatternSpec pattern, GetPattern(j, path));
    ASSIGN_OR_RETURN(Behavior behavior, ParseBehavior(j, path));
    bool invert = false;
    RETURN_IF_ERROR(GetBool(j, path, "invert", &invert));
    std::shared_ptr<const Regex> regex;
    if (pattern.is_regex) {
      ASSIGN_OR_RETURN(regex, CompileAt(pattern.text, path + ".pattern"));
      pattern.text.clear();
    }
    return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(regex, pattern.text, behavior, invert));
  }
  if (type == "ByteLevel") {
    bool add_prefix_space = true, use_regex = true;
    RETURN_IF_ERROR(GetBool(j, path, "add_prefix_space", &add_prefix_space));
    RETURN_IF_ERROR(GetBool(j, path, "use_regex", &use_regex));
    std::shared_ptr<const Regex> regex;
    if (use_regex) {
      ASSIGN_OR_RETURN(regex, CompileAt(kGpt2Pattern, path));
    }
    return std::unique_ptr<PreTokenizer>(new ByteLevelPreTokenizer(add_prefix_space, regex));
  }
  if (type == "Digits") {
    bool individual = false;
    RETURN_IF_ERROR(GetBool(j, path, "individual_digits", &individual));
    ASSIGN_OR_RETURN(auto regex, CompileAt(individual ? "\\p{N}" : "\\p{N}+", path));
    return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(regex, "", Behavior::kIsolated, false));
  }
  if (type == "Metaspace") {
    std::string replacement = "\xE2\x96\x81", scheme = "always";
    RETURN_IF_ERROR(GetString(j, path, "replacement", &replacement, false));
    bool add_prefix_space = true, split = true;
    RETURN_IF_ERROR(GetBool(j, path, "add_prefix_space", &add_prefix_space));
    RETURN_IF_ERROR(GetBool(j, path, "split", &split));
    if (!add_prefix_space) scheme = "never";
    RETURN_IF_ERROR(GetString(j, path, "prepend_scheme", &scheme, false));
    PrependScheme ps;
    if (scheme == "always") ps = PrependScheme::kAlways;
    else if (scheme == "first") ps = PrependScheme::kFirst;
    else if (scheme == "never") ps = PrependScheme::kNever;
    else return InvalidArgument(path + ".prepend_scheme: unknown value '" + scheme + "'");
    if (replacement.empty()) return InvalidArgument(path + ".replacement: must not be empty");
    return std::unique_ptr<PreTokenizer>(new MetaspacePreTokenizer(replacement, ps, split));
  }
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(auto parts, ParseParts<PreTokenizer>(j, path, "pretokenizers", ParsePreTokenizer));
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(parts)));
  }
  return Unsupported(path, type);
}

}  // namespace tessera::text
