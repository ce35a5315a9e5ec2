// Python-compatible string helpers for the Jinja interpreter: code-point aware
// length/indexing, str.strip/split/upper/lower/title, repr() of strings and floats.
// All functions are pure and thread-safe; cost is linear in the input size.
// Strings are UTF-8; invalid bytes are treated as single code points (U+FFFD-like)
// so nothing here can fail or read out of bounds.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::jinja {

// Decodes UTF-8 into code points (invalid bytes become 0xFFFD).
std::vector<char32_t> DecodeUtf8(std::string_view s);
void AppendUtf8(char32_t cp, std::string* out);
std::string EncodeUtf8(const std::vector<char32_t>& cps);
// Number of code points (Python len(str)).
int64_t Utf8Length(std::string_view s);

// Python str.isspace() for one code point.
bool PyIsSpace(char32_t cp);

// str.strip/lstrip/rstrip; `chars` == nullptr strips whitespace.
enum class StripSide { kBoth, kLeft, kRight };
std::string PyStrip(std::string_view s, const std::string* chars, StripSide side);
// str.split(sep, maxsplit); sep == nullptr splits on whitespace runs.
std::vector<std::string> PySplit(std::string_view s, const std::string* sep, int64_t maxsplit);
// str.replace(old, new, count); count < 0 replaces all.
std::string PyReplace(std::string_view s, std::string_view old_s, std::string_view new_s,
                      int64_t count);
// str.splitlines() (without keepends).
std::vector<std::string> PySplitLines(std::string_view s);
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyTitle(std::string_view s);       // str.title()
std::string PyCapitalize(std::string_view s);  // str.capitalize()

// repr(str) with Python's quote choice and escapes.
std::string PyReprString(std::string_view s);
// repr(float): shortest round-trip, Python formatting ("1.0", "1e+16", "inf").
std::string PyReprFloat(double d);
// JSON string literal as Python's json.dumps(ensure_ascii=False) writes it.
void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out);

}  // namespace tessera::jinja
