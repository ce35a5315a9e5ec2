#include "text/decoders.h"

#include <utility>

#include "text/byte_level.h"
#include "text/normalizers.h"
#include "text/regex.h"
#include "text/utf8.h"

namespace tessera::text {
namespace {

void Fuse(DecodeChain* c) {
  std::string all;
  for (const std::string& t : c->tokens) all += t;
  c->tokens.assign(1, std::move(all));
  c->added.assign(1, 0);
}

// Builds a decoded chain in which runs of raw bytes become one token each
// (invalid UTF-8 repaired) and other tokens pass through.
class ByteRuns {
 public:
  void Byte(int byte) { bytes_.push_back(static_cast<char>(byte)); }
  void Bytes(const std::string& s, size_t pos, size_t n) { bytes_.append(s, pos, n); }
  void Token(const std::string& t, uint8_t added) {
    Flush();
    out_.tokens.push_back(t);
    out_.added.push_back(added);
  }
  DecodeChain Finish() {
    Flush();
    return std::move(out_);
  }

 private:
  void Flush() {
    if (bytes_.empty()) return;
    out_.tokens.push_back(RepairUtf8(bytes_));
    out_.added.push_back(0);
    bytes_.clear();
  }
  DecodeChain out_;
  std::string bytes_;
};

class ByteLevelDecoder : public Decoder {
 public:
  // Runs of non-added tokens are mapped back to bytes and decoded together;
  // added tokens are kept as they are.
  void Decode(DecodeChain* c) const override {
    ByteRuns out;
    for (size_t k = 0; k < c->tokens.size(); ++k) {
      const std::string& t = c->tokens[k];
      if (c->added[k]) {
        out.Token(t, 1);
        continue;
      }
      size_t i = 0;
      while (i < t.size()) {
        const size_t b = i;
        const char32_t cp = NextCodePoint(t, &i);
        const int byte = UnicodeToByte(cp);
        if (byte >= 0) {
          out.Byte(byte);
        } else {
          out.Bytes(t, b, i - b);  // not a byte-level char: keep its UTF-8
        }
      }
    }
    *c = out.Finish();
  }
};

class ByteFallbackDecoder : public Decoder {
 public:
  void Decode(DecodeChain* c) const override {
    ByteRuns out;
    for (size_t k = 0; k < c->tokens.size(); ++k) {
      const std::string& t = c->tokens[k];
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') byte = ParseHexByte(t[3], t[4]);
      if (byte >= 0) {
        out.Byte(byte);
      } else {
        out.Token(t, c->added[k]);
      }
    }
    *c = out.Finish();
  }

 private:
  static int Hex(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
  }
  static int ParseHexByte(char a, char b) {
    const int hi = Hex(a), lo = Hex(b);
    return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
  }
};

class FuseDecoder : public Decoder {
 public:
  void Decode(DecodeChain* c) const override { Fuse(c); }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, int start, int stop) : content_(std::move(content)), start_(start), stop_(stop) {}
  // Removes up to start_ leading and stop_ trailing copies of content_ from each token.
  void Decode(DecodeChain* c) const override {
    if (content_.empty()) return;
    for (std::string& t : c->tokens) {
      size_t b = 0, e = t.size();
      for (int i = 0; i < start_ && b + content_.size() <= e && t.compare(b, content_.size(), content_) == 0; ++i) {
        b += content_.size();
      }
      for (int i = 0; i < stop_ && e >= b + content_.size() &&
                      t.compare(e - content_.size(), content_.size(), content_) == 0;
           ++i) {
        e -= content_.size();
      }
      t = t.substr(b, e - b);
    }
  }

 private:
  std::string content_;
  int start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string literal, std::shared_ptr<const Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  void Decode(DecodeChain* c) const override {
    for (std::string& t : c->tokens) t = ReplaceAll(t, literal_, regex_.get(), content_);
  }

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;
  std::string content_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first) : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void Decode(DecodeChain* c) const override {
    for (size_t i = 0; i < c->tokens.size(); ++i) {
      std::string t = ReplaceAll(c->tokens[i], replacement_, nullptr, " ");
      if (strip_first_ && i == 0 && !t.empty() && t[0] == ' ') t.erase(0, 1);
      c->tokens[i] = std::move(t);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void Decode(DecodeChain* c) const override {
    for (const auto& p : parts_) p->Decode(c);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const Json& j, const std::string& path) {
  ASSIGN_OR_RETURN(std::string type, GetType(j, path));
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Strip") {
    std::string content;
    long long start = 0, stop = 0;
    RETURN_IF_ERROR(GetString(j, path, "content", &content, true));
    RETURN_IF_ERROR(GetInt(j, path, "start", &start));
    RETURN_IF_ERROR(GetInt(j, path, "stop", &stop));
    if (start < 0 || stop < 0 || start > 1 << 20 || stop > 1 << 20) {
      return InvalidArgument(path + ": start/stop out of range");
    }
    return std::unique_ptr<Decoder>(new StripDecoder(content, static_cast<int>(start), static_cast<int>(stop)));
  }
  if (type == "Replace") {
    ASSIGN_OR_RETURN(ReplaceSpec r, ParseReplace(j, path));
    return std::unique_ptr<Decoder>(new ReplaceDecoder(r.literal, r.regex, r.content));
  }
  if (type == "Metaspace") {
    std::string replacement = "\xE2\x96\x81", scheme = "always";
    bool add_prefix_space = true;
    RETURN_IF_ERROR(GetString(j, path, "replacement", &replacement, false));
    RETURN_IF_ERROR(GetBool(j, path, "add_prefix_space", &add_prefix_space));
    if (!add_prefix_space) scheme = "never";
    RETURN_IF_ERROR(GetString(j, path, "prepend_scheme", &scheme, false));
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(replacement, scheme != "never"));
  }
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(auto parts, ParseParts<Decoder>(j, path, "decoders", ParseDecoder));
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(parts)));
  }
  return Unsupported(path, type);
}

}  // namespace tessera::text
