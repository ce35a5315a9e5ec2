#include "server/http/byte_level_decoder.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace tessera {
namespace {

using json = nlohmann::json;

// Inverse of GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to the
// same code point; the other 68 bytes map to U+0100.. in byte order.
// Entry c holds the byte for code point c, or -1.
const std::array<int, 512>& UnicodeToByte() {
  static const std::array<int, 512> table = [] {
    std::array<int, 512> t;
    t.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[printable ? b : next++] = b;
    }
    return t;
  }();
  return table;
}

// Decodes one code point of valid UTF-8 at s[i], advancing i.
uint32_t NextCodePoint(std::string_view s, size_t* i) {
  const auto c = static_cast<unsigned char>(s[*i]);
  const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < len && *i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[*i + k]) & 0x3F);
  *i += len;
  return cp;
}

// A vocab entry's string -> the bytes it stands for.
std::string TokenBytes(std::string_view token) {
  const auto& table = UnicodeToByte();
  std::string out;
  for (size_t i = 0; i < token.size();) {
    const size_t start = i;
    const uint32_t cp = NextCodePoint(token, &i);
    if (cp < table.size() && table[cp] >= 0) {
      out.push_back(static_cast<char>(table[cp]));
    } else {
      out.append(token.substr(start, i - start));  // not byte-mapped: keep as is
    }
  }
  return out;
}

bool HasByteLevelDecoder(const json& d) {
  if (!d.is_object()) return false;
  if (d.value("type", "") == "ByteLevel") return true;
  if (d.value("type", "") == "Sequence" && d.contains("decoders") && d["decoders"].is_array()) {
    for (const auto& sub : d["decoders"]) {
      if (HasByteLevelDecoder(sub)) return true;
    }
  }
  return false;
}

}  // namespace

StatusOr<ByteLevelDecoder> ByteLevelDecoder::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  const json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(path + ": not a JSON object");
  if (!j.contains("model") || !j["model"].is_object() || j["model"].value("type", "") != "BPE" ||
      !j["model"].contains("vocab") || !j["model"]["vocab"].is_object()) {
    return Unimplemented(path + ": only BPE models with a 'model.vocab' map are supported by the minimal decoder");
  }
  if (!j.contains("decoder") || !HasByteLevelDecoder(j["decoder"])) {
    return Unimplemented(path + ": decoder is not ByteLevel; only byte-level BPE is supported by the minimal decoder");
  }
  std::vector<std::pair<std::string, int64_t>> vocab;
  for (const auto& [token, id] : j["model"]["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (1 << 24)) {
      return InvalidArgument(path + ": model.vocab['" + token + "'] is not a valid id");
    }
    vocab.emplace_back(token, id.get<int64_t>());
  }
  std::vector<AddedToken> added;
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const auto& t : j["added_tokens"]) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
          t["id"].get<int64_t>() > (1 << 24) || !t.contains("content") || !t["content"].is_string()) {
        return InvalidArgument(path + ": malformed entry in added_tokens");
      }
      added.push_back({t["id"].get<int64_t>(), t["content"].get<std::string>(), t.value("special", false)});
    }
  }
  return FromVocab(vocab, added);
}

ByteLevelDecoder ByteLevelDecoder::FromVocab(const std::vector<std::pair<std::string, int64_t>>& vocab,
                                             const std::vector<AddedToken>& added) {
  ByteLevelDecoder d;
  int64_t size = 0;
  for (const auto& [token, id] : vocab) size = std::max(size, id + 1);
  for (const auto& t : added) size = std::max(size, t.id + 1);
  d.bytes_.assign(static_cast<size_t>(size), "");
  d.skip_.assign(static_cast<size_t>(size), true);
  for (const auto& [token, id] : vocab) {
    d.bytes_[id] = TokenBytes(token);
    d.skip_[id] = false;
  }
  for (const auto& t : added) {
    d.bytes_[t.id] = t.special ? "" : t.content;
    d.skip_[t.id] = t.special;
  }
  return d;
}

std::string ByteLevelDecoder::Decode(const std::vector<int32_t>& ids) const {
  std::string raw;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= bytes_.size() || skip_[id]) continue;
    raw += bytes_[id];
  }
  return SanitizeUtf8(raw);
}

std::string SanitizeUtf8(std::string_view s) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c < 0x80) {
      len = 1;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlongs
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;  // <= U+10FFFF
    }
    if (len == 0) {  // stray continuation byte or invalid lead
      out += kReplacement;
      ++i;
      continue;
    }
    int k = 1;
    for (; k < len && i + k < s.size(); ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    }
    if (k == len) {
      out.append(s.substr(i, len));
    } else {
      out += kReplacement;  // one U+FFFD for the maximal valid prefix
    }
    i += k;
  }
  return out;
}

}  // namespace tessera
