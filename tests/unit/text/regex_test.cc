#include "text/regex.h"

#include <gtest/gtest.h>

namespace tessera::text {
namespace {

std::vector<std::string> Matches(const Regex& re, std::string_view s) {
  std::vector<std::string> out;
  re.ForEachMatch(s, [&](size_t b, size_t e) { out.emplace_back(s.substr(b, e - b)); });
  return out;
}

// U+1FABF GOOSE was added in Unicode 15 (So). Debian's PCRE2 has Unicode 14
// tables; the rewrite adds newer code points from ICU so \p{S} matches it the
// way the oracle (V8 + ICU) does.
TEST(RegexTest, CategoryClassesKnowNewerUnicode) {
  const std::string goose = "\xF0\x9F\xAA\xBF";
  auto s = Regex::Compile("\\p{S}+");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(Matches(**s, "a" + goose + goose + "b"), std::vector<std::string>{goose + goose});
  auto in_class = Regex::Compile("[\\p{P}\\p{S}]");
  ASSERT_TRUE(in_class.ok());
  EXPECT_EQ(Matches(**in_class, goose + "x!"), (std::vector<std::string>{goose, "!"}));
  auto negated = Regex::Compile("\\P{S}+");
  ASSERT_TRUE(negated.ok());
  EXPECT_EQ(Matches(**negated, "ab" + goose + "cd"), (std::vector<std::string>{"ab", "cd"}));
  // Letters are unaffected by symbol additions.
  auto letters = Regex::Compile("\\p{L}+");
  ASSERT_TRUE(letters.ok());
  EXPECT_EQ(Matches(**letters, "héllo" + goose), std::vector<std::string>{"héllo"});
}

TEST(RegexTest, RewriteLeavesOtherEscapesAlone) {
  EXPECT_EQ(RewritePatternForPcre2("\\d+\\w"), "\\d+\\w");
  EXPECT_NE(RewritePatternForPcre2("\\p{So}").find("1FABF"), std::string::npos);
}

}  // namespace
}  // namespace tessera::text
