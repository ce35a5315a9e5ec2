#include "text/byte_level.h"

#include <vector>

#include "text/utf8.h"

namespace tessera::text {
namespace {

struct Tables {
  std::array<std::string, 256> to_unicode;
  std::array<char32_t, 256> code_point{};
  std::vector<int16_t> to_byte;  // indexed by code point, -1 if none
  Tables() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      code_point[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    }
    to_byte.assign(512, -1);
    for (int b = 0; b < 256; ++b) {
      AppendUtf8(code_point[b], &to_unicode[b]);
      to_byte[code_point[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

const std::array<std::string, 256>& ByteToUnicodeTable() { return GetTables().to_unicode; }

int UnicodeToByte(char32_t c) {
  const Tables& t = GetTables();
  return c < t.to_byte.size() ? t.to_byte[c] : -1;
}

void ByteLevelEncode(std::string_view bytes, std::string* out) {
  const auto& table = GetTables().to_unicode;
  out->reserve(out->size() + bytes.size() * 2);
  for (char ch : bytes) out->append(table[static_cast<uint8_t>(ch)]);
}

}  // namespace tessera::text
