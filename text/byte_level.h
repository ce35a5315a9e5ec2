// GPT-2 byte-to-unicode mapping used by ByteLevel pre-tokenizers and decoders:
// each byte maps to one printable code point. Tables are built once (static,
// thread-safe) and read-only afterwards.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::text {

// UTF-8 encoding of the code point that byte b maps to.
const std::array<std::string, 256>& ByteToUnicodeTable();
// Maps a code point back to its byte; returns -1 if it is not in the table.
int UnicodeToByte(char32_t c);

// Appends the byte-level form of `bytes` to `out`.
void ByteLevelEncode(std::string_view bytes, std::string* out);

}  // namespace tessera::text
