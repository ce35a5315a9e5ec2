// The context-independent precompute (PositionTable) gives exactly the mask of
// a full vocabulary-trie walk and of trying every token on a copy of the
// matcher, on random walks through random grammars and vocabularies.
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "structured/gbnf.h"
#include "structured/json_schema.h"
#include "structured/matcher.h"

namespace tessera::structured {
namespace {

// Every byte, plus `n` random tokens of 2..10 bytes over `alphabet` (shared
// prefixes, tokens that cross rule boundaries, like a BPE vocabulary's).
std::shared_ptr<const TokenVocab> RandomVocab(std::mt19937_64& rng, const std::string& alphabet, int n) {
  std::vector<std::optional<std::string>> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  for (int i = 0; i < n; ++i) {
    std::string t;
    const size_t len = 2 + rng() % 9;
    for (size_t k = 0; k < len; ++k) t += alphabet[rng() % alphabet.size()];
    v.push_back(t);
  }
  v.push_back(std::nullopt);
  return TokenVocab::Create(std::move(v));
}

std::vector<int32_t> Bits(const std::vector<uint32_t>& mask) {
  std::vector<int32_t> out;
  for (size_t w = 0; w < mask.size(); ++w) {
    for (uint32_t b = mask[w]; b; b &= b - 1) out.push_back(static_cast<int32_t>(w * 32 + __builtin_ctz(b)));
  }
  return out;
}

// Random walks: at every step the table mask equals the full-walk mask; every
// few steps both equal the per-token brute force.
void CheckWalks(const std::string& gbnf, const std::string& alphabet, uint64_t seed, int walks, int steps) {
  std::mt19937_64 rng(seed);
  auto g = ParseGbnf(gbnf, CompileLimits{}, std::chrono::steady_clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(g.ok()) << g.status().ToString() << "\n" << gbnf;
  auto compiled = std::make_shared<const CompiledGrammar>(std::move(*g), RandomVocab(rng, alphabet, 1000));
  std::vector<uint32_t> fast(static_cast<size_t>(compiled->mask_words())), full(fast.size());
  int checked = 0;
  for (int w = 0; w < walks; ++w) {
    GrammarMatcher m(compiled);
    for (int s = 0; s < steps; ++s) {
      m.FillMask(fast);
      m.FillMaskFullWalk(full);
      ASSERT_EQ(Bits(fast), Bits(full)) << "walk " << w << " step " << s;
      if (s % 25 == 3) {
        for (int32_t t = 0; t < compiled->vocab().size(); ++t) {
          GrammarMatcher copy = m;
          ASSERT_EQ(copy.AcceptToken(t), ((fast[t >> 5] >> (t & 31)) & 1) != 0) << "token " << t << " step " << s;
        }
      }
      ++checked;
      const std::vector<int32_t> allowed = Bits(fast);
      if (allowed.empty()) break;
      ASSERT_TRUE(m.AcceptToken(allowed[rng() % allowed.size()]));
    }
  }
  EXPECT_GT(checked, walks * 3);
}

TEST(MaskPrecomputeTest, HandWrittenGrammars) {
  CheckWalks(R"g(root ::= "{" ws (pair ("," ws pair)*)? "}"
pair ::= "\"" [a-c]* "\":" ws (num | "true" | "false" | "null" | "\"\u00e9x\"" | root)
num ::= "-"? [1-9] [0-9]*
ws ::= " "?)g",
             "{}\",: abc-0123456789truefalsn\xC3\xA9x", 1, 4, 40);
  CheckWalks(R"g(root ::= (expr "=" ws term "\n"){1,3}
expr ::= term ([-+*/] term){0,3}
term ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]{0,4} ws
num ::= [0-9]{1,4} ws
ws ::= [ \t]{0,2})g",
             "abz019_ \t()=+-*/\n", 2, 4, 40);
  CheckWalks(R"g(root ::= item{1,5}
item ::= "- " [^\n]{1,12} "\n" | "* " ("ab" | "a" | "b")+ "\n")g", "- *ab\nxy", 3, 4, 40);
}

// JSON Schemas through the real converter (strings, numbers, nesting, enums).
TEST(MaskPrecomputeTest, JsonSchemaGrammars) {
  const char* schemas[] = {
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"n":{"type":"integer"},
          "tags":{"type":"array","items":{"enum":["a","bc","a\"b"]},"maxItems":3},
          "sub":{"type":"object","properties":{"x":{"type":"number"},"ok":{"type":"boolean"}},"required":["x"]}},
          "required":["name","n"]})",
      R"({"type":"array","items":{"anyOf":[{"type":"string"},{"type":"integer","minimum":-20,"maximum":300},
          {"type":"null"}]},"maxItems":4})",
  };
  uint64_t seed = 10;
  for (const char* s : schemas) {
    auto gbnf = JsonSchemaToGbnf(nlohmann::ordered_json::parse(s), CompileLimits{});
    ASSERT_TRUE(gbnf.ok()) << gbnf.status().ToString();
    CheckWalks(*gbnf, "{}[]\",: \nabcnmetsxok-0123456789.eEtruefalsnul\\", seed++, 4, 50);
  }
}

}  // namespace
}  // namespace tessera::structured
