// Lexer: splits template source into data and tag tokens exactly as Jinja 3.1's
// lexer does with HF's settings (trim_blocks, lstrip_blocks, no trailing newline
// kept): whitespace control (-/+), comments and {% raw %} are resolved here.
// Pure function; linear in the source size.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::jinja {

enum class TokenType {
  kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof
};

struct Token {
  TokenType type;
  std::string value;  // data text, name, unescaped string, operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;
};

struct LexerOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;
};

// Throws TemplateError (kSyntax) on malformed input.
std::vector<Token> Tokenize(std::string_view source, const LexerOptions& options);

const char* TokenTypeName(TokenType t);

}  // namespace tessera::jinja
