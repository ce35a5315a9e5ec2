// structured/: GBNF parsing, UTF-8 lowering, the byte-level matcher and
// its token masks (against a brute-force per-token check), regex and JSON
// Schema conversion (against std::regex and plain arithmetic as oracles).
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "structured/gbnf.h"
#include "structured/json_schema.h"
#include "structured/matcher.h"
#include "structured/regex.h"
#include "structured/structured.h"

namespace tessera::structured {
namespace {

auto Far() { return std::chrono::steady_clock::now() + std::chrono::seconds(10); }

// Every single byte as a token, plus some multi-byte ones (one splits "é").
std::shared_ptr<const TokenVocab> ToyVocab() {
  std::vector<std::optional<std::string>> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  for (const char* t : {"ab", "abc", "{\"", "\":", "true", "false", "null", "12", "\xC3", "\xA9x", "\xC3\xA9", "aaaa"}) {
    v.push_back(std::string(t));
  }
  v.push_back(std::nullopt);  // a special token: never allowed
  return TokenVocab::Create(std::move(v));
}

std::shared_ptr<const CompiledGrammar> Compile(const std::string& gbnf) {
  StatusOr<Grammar> g = ParseGbnf(gbnf, CompileLimits{}, Far());
  EXPECT_TRUE(g.ok()) << g.status().ToString() << "\n" << gbnf;
  if (!g.ok()) return nullptr;
  return std::make_shared<const CompiledGrammar>(std::move(*g), ToyVocab());
}

bool Accepts(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.AcceptBytes(text) && m.CanEnd();
}

TEST(Utf8SequencesTest, CoversExactlyTheRange) {
  for (auto [lo, hi] : std::vector<std::pair<uint32_t, uint32_t>>{{0, 0x10FFFF}, {0x41, 0x7FF}, {0x7FF, 0x800},
                                                                  {0xD000, 0xE100}, {0x10000, 0x10FFFF}, {0x80, 0x80}}) {
    const auto seqs = Utf8Sequences(lo, hi);
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x20000 ? 1 : 97)) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      std::string enc;
      AppendUtf8(cp, &enc);
      int matches = 0;
      for (const auto& seq : seqs) {
        if (seq.size() != enc.size()) continue;
        bool ok = true;
        for (size_t i = 0; i < seq.size(); ++i) {
          const uint8_t b = static_cast<uint8_t>(enc[i]);
          ok = ok && b >= seq[i].first && b <= seq[i].second;
        }
        matches += ok;
      }
      ASSERT_EQ(matches, (cp >= lo && cp <= hi) ? 1 : 0) << std::hex << cp << " in [" << lo << "," << hi << "]";
    }
  }
}

TEST(GbnfTest, ParsesAndMatches) {
  auto g = Compile(R"(
# a comment
root ::= greeting ("," ws name)? "!"
greeting ::= "hi" | "hello"
name ::= [A-Z] [a-z]{1,5}   # trailing comment
ws ::= [ \t]*
)");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, "hi!"));
  EXPECT_TRUE(Accepts(g, "hello,  Bob!"));
  EXPECT_FALSE(Accepts(g, "hello,Bobbbbbbb!"));
  EXPECT_FALSE(Accepts(g, "hey!"));
  EXPECT_FALSE(Accepts(g, "hi"));
}

TEST(GbnfTest, UnicodeClassesAreMatchedBytewise) {
  auto g = Compile(R"(root ::= [^a-z"]+ "." | [\u00e0-\u00ff] "x")");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, "\xC3\xA9x"));              // é x
  EXPECT_TRUE(Accepts(g, "\xE6\x97\xA5\xF0\x9F\x98\x80."));  // 日😀.
  EXPECT_FALSE(Accepts(g, "\xC3x"));                 // a lone lead byte
  EXPECT_FALSE(Accepts(g, "abc."));
}

TEST(GbnfTest, RejectsBadGrammars) {
  const CompileLimits limits;
  for (const char* bad : {"root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"",  // left recursion
                          "root ::= a\na ::= b? root \"x\"\nb ::= \"y\"",         // left recursion through nullable
                          "root ::= (\"a\"?)*",                                   // nullable repetition
                          "root ::= missing", "foo ::= \"a\"", "root ::= \"a", "root ::= [a-",
                          "root ::= \"a\"{3,1}", "root ::= \"a\"{5000}", "root ::= \"a\"\nroot ::= \"b\"",
                          "root ::= <[123]>", "root ::= x\nx ::= x \"a\"", "root ::= []"}) {
    StatusOr<Grammar> g = ParseGbnf(bad, limits, Far());
    EXPECT_FALSE(g.ok()) << bad;
  }
  // Nested repetitions share their rules (small grammar, huge language); flat ones are bounded.
  EXPECT_TRUE(ParseGbnf("root ::= ((\"ab\"{1000}){1000}){1000}", limits, Far()).ok());
  std::string flat = "root ::=";
  for (int i = 0; i < 300; ++i) flat += " [a-z]{1000}";
  EXPECT_FALSE(ParseGbnf(flat, limits, Far()).ok());
}

// The mask agrees with trying each token on a copy of the matcher.
void ExpectMaskMatchesBruteForce(const std::shared_ptr<const CompiledGrammar>& g, const std::string& prefix) {
  GrammarMatcher m(g);
  ASSERT_TRUE(m.AcceptBytes(prefix)) << prefix;
  std::vector<uint32_t> mask(static_cast<size_t>(g->mask_words()));
  for (int round = 0; round < 2; ++round) {  // the second round comes from the mask cache
    m.FillMask(mask);
    for (int32_t t = 0; t < g->vocab().size(); ++t) {
      GrammarMatcher copy = m;
      const bool ok = copy.AcceptToken(t);
      const bool bit = (mask[t >> 5] >> (t & 31)) & 1;
      ASSERT_EQ(bit, ok) << "token " << t << " after '" << prefix << "' round " << round;
    }
  }
}

TEST(MatcherTest, MaskEqualsBruteForce) {
  auto g = Compile(R"(root ::= "{" ws (pair ("," ws pair)*)? "}"
pair ::= "\"" [a-c]* "\":" ws (num | "true" | "false" | "null" | "\"\u00e9x\"")
num ::= "-"? [1-9] [0-9]*
ws ::= " "?)");
  ASSERT_NE(g, nullptr);
  for (const char* prefix : {"", "{", "{\"a", "{\"ab\":", "{\"ab\": 12", "{\"\": \"\xC3", "{\"a\":true,", "{}"}) {
    ExpectMaskMatchesBruteForce(g, prefix);
  }
}

TEST(MatcherTest, CompletionStates) {
  auto g = Compile(R"(root ::= "a" [0-9]*)");
  ASSERT_NE(g, nullptr);
  GrammarMatcher m(g);
  EXPECT_FALSE(m.CanEnd());
  EXPECT_FALSE(m.AcceptBytes("b"));
  EXPECT_TRUE(m.AcceptBytes("a1"));
  EXPECT_TRUE(m.CanEnd());
  EXPECT_FALSE(m.IsComplete());
  auto fixed = Compile(R"(root ::= "ok")");
  GrammarMatcher f(fixed);
  EXPECT_TRUE(f.AcceptBytes("ok"));
  EXPECT_TRUE(f.IsComplete());
  std::vector<uint32_t> mask(static_cast<size_t>(fixed->mask_words()), 0xFFFFFFFFu);
  f.FillMask(mask);
  for (uint32_t w : mask) EXPECT_EQ(w, 0u);
  // A special (nullopt) token is never accepted.
  GrammarMatcher any(Compile("root ::= .*"));
  EXPECT_FALSE(any.AcceptToken(g->vocab().size() - 1));
}

TEST(MatcherTest, LongRepetitionKeepsStacksFlat) {
  auto g = Compile(R"(root ::= "[" ("x" ",")* "]")");
  GrammarMatcher m(g);
  std::string s = "[";
  for (int i = 0; i < 5000; ++i) s += "x,";
  EXPECT_TRUE(m.AcceptBytes(s));
  EXPECT_TRUE(m.AcceptBytes("]"));
  EXPECT_TRUE(m.IsComplete());
}

TEST(GrammarRegexTest, AgreesWithStdRegex) {
  const std::vector<std::string> patterns = {"[a-c]{1,3}@(x|yz)\\.com", "\\d{2,3}-?\\d", "(ab|a)*b", "a.c",
                                             "[^a-c]{2}", "x?y+z*", "(?:foo|ba[rz])+", "\\w\\s\\W", "a{2,}b{0,1}"};
  const std::vector<std::string> inputs = {"", "a@x.com", "abc@yz.com", "abcd@x.com", "12-3", "1234", "12",
                                           "abab", "aab", "b", "abc", "a\nc", "a.c", "dd", "de", "a", "yyy",
                                           "xyzz", "foobar", "baz", "bax", "a b!", "a_ b", "aab", "aaaab", "aa"};
  for (const std::string& p : patterns) {
    StatusOr<std::string> expr = RegexToGbnf(p, CompileLimits{});
    ASSERT_TRUE(expr.ok()) << p << ": " << expr.status().ToString();
    auto g = Compile("root ::= " + *expr);
    ASSERT_NE(g, nullptr) << p;
    const std::regex re(p);
    for (const std::string& in : inputs) {
      EXPECT_EQ(Accepts(g, in), std::regex_match(in, re)) << "pattern " << p << " input '" << in << "'";
    }
  }
  for (const char* bad : {"(a", "a)", "a(?=b)", "\\1", "a{3,1}", "a**", "\\bx", "a^b", "x{5000}", "[a-"}) {
    EXPECT_FALSE(RegexToGbnf(bad, CompileLimits{}).ok()) << bad;
  }
}

std::shared_ptr<const CompiledGrammar> FromSchema(const nlohmann::ordered_json& schema) {
  StatusOr<std::string> gbnf = JsonSchemaToGbnf(schema, CompileLimits{});
  EXPECT_TRUE(gbnf.ok()) << gbnf.status().ToString();
  return gbnf.ok() ? Compile(*gbnf) : nullptr;
}

TEST(JsonSchemaTest, IntegerRangesAreExact) {
  for (auto [lo, hi] : std::vector<std::pair<int, int>>{{0, 130}, {-5, 1234}, {-120, -7}, {7, 7}, {99, 1000}}) {
    auto g = FromSchema({{"type", "integer"}, {"minimum", lo}, {"maximum", hi}});
    ASSERT_NE(g, nullptr);
    for (int n = -1500; n <= 1500; ++n) {
      ASSERT_EQ(Accepts(g, std::to_string(n)), n >= lo && n <= hi) << n << " in [" << lo << "," << hi << "]";
    }
    EXPECT_FALSE(Accepts(g, "007"));
  }
  auto open = FromSchema({{"type", "integer"}, {"exclusiveMinimum", 41}});
  EXPECT_FALSE(Accepts(open, "41"));
  EXPECT_TRUE(Accepts(open, "42"));
  EXPECT_TRUE(Accepts(open, "123456789"));
  EXPECT_FALSE(Accepts(open, "-3"));
}

TEST(JsonSchemaTest, ObjectsArraysAndStrings) {
  auto g = FromSchema(nlohmann::ordered_json::parse(R"({"type":"object","properties":{
      "a":{"type":"string","maxLength":2},"b":{"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":2},
      "c":{"enum":["x",1,null]}},"required":["b"]})"));
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(Accepts(g, R"({"b":[true]})"));
  EXPECT_TRUE(Accepts(g, R"({"a":"\u00e9z", "b": [false,true] ,"c":null})"));
  EXPECT_TRUE(Accepts(g, R"({"a":"","b":[true],"c":1})"));
  EXPECT_FALSE(Accepts(g, R"({"a":"abc","b":[true]})"));
  EXPECT_FALSE(Accepts(g, R"({"b":[]})"));
  EXPECT_FALSE(Accepts(g, R"({"b":[true,true,true]})"));
  EXPECT_FALSE(Accepts(g, R"({"a":"x"})"));
  EXPECT_FALSE(Accepts(g, R"({"b":[true],"d":1})"));  // additionalProperties absent: none generated
  EXPECT_FALSE(Accepts(g, R"({"b":[true],"c":"y"})"));
  auto extra = FromSchema(nlohmann::ordered_json::parse(
      R"({"type":"object","properties":{"k":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})"));
  EXPECT_TRUE(Accepts(extra, R"({"k":1,"z":true})"));
  EXPECT_TRUE(Accepts(extra, R"({"z":true,"kk":false})"));
  EXPECT_FALSE(Accepts(extra, R"({"k":true})"));  // a declared key is not an additional one
  EXPECT_FALSE(Accepts(extra, R"({"z":1})"));
  auto date = FromSchema({{"type", "string"}, {"format", "date"}});
  EXPECT_TRUE(Accepts(date, "\"2024-02-28\""));
  EXPECT_FALSE(Accepts(date, "\"2024-02-30\""));
  EXPECT_FALSE(Accepts(date, "\"2024-04-31\""));
  auto rec = FromSchema(nlohmann::ordered_json::parse(
      R"({"$ref":"#/$defs/n","$defs":{"n":{"type":"array","items":{"$ref":"#/$defs/n"},"maxItems":2}}})"));
  EXPECT_TRUE(Accepts(rec, "[[],[[]]]"));
  EXPECT_FALSE(Accepts(rec, "[[],[],[]]"));
  auto pat = FromSchema({{"type", "string"}, {"pattern", "b\"c"}});
  EXPECT_TRUE(Accepts(pat, R"("xb\"cy")"));
  EXPECT_FALSE(Accepts(pat, R"("xbcy")"));
}

TEST(JsonSchemaTest, RefusesWhatItCannotEnforce) {
  for (const char* bad : {R"({"not":{}})", R"({"type":"objekt"})", R"({"type":"integer","minimum":3,"maximum":1})",
                          R"({"$ref":"#/nope"})", R"({"$ref":"http://x/y"})", R"({"enum":[]})", R"(false)",
                          R"({"type":"string","format":"uri"})", R"({"type":"array","uniqueItems":true})",
                          R"({"type":"number","maximum":3})", R"({"type":"object","required":["x"]})",
                          R"({"allOf":[{},{}]})", R"x({"type":"string","pattern":"(?=a)"})x",
                          R"({"type":"array","minItems":5,"maxItems":2})"}) {
    EXPECT_FALSE(JsonSchemaToGbnf(nlohmann::ordered_json::parse(bad), CompileLimits{}).ok()) << bad;
  }
  nlohmann::ordered_json deep = {{"type", "integer"}};
  for (int i = 0; i < 40; ++i) deep = {{"type", "array"}, {"items", deep}};
  EXPECT_FALSE(JsonSchemaToGbnf(deep, CompileLimits{}).ok());
}

TEST(JsonSchemaTest, EmbedsInABiggerGrammar) {
  nlohmann::ordered_json params = {{"type", "object"},
                                   {"properties", {{"city", {{"type", "string"}, {"maxLength", 8}}}}},
                                   {"required", {"city"}}};
  StatusOr<std::string> args = JsonSchemaToGbnf(params, CompileLimits{}, {.root_name = "args", .rule_prefix = "t0-"});
  ASSERT_TRUE(args.ok());
  const std::string g = "root ::= \"<tool_call>\" t0-args \"</tool_call>\"\n" + *args;
  auto c = Compile(g);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(Accepts(c, R"(<tool_call>{"city":"Oslo"}</tool_call>)"));
  EXPECT_FALSE(Accepts(c, R"(<tool_call>{}</tool_call>)"));
}

TEST(StructuredOutputsTest, CachesAndBuildsConstraints) {
  StructuredOutputs so(ToyVocab());
  auto a = so.CompileGbnf("root ::= \"x\"");
  auto b = so.CompileGbnf("root ::= \"x\"");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());
  auto choice = so.Choice({"yes", "no"});
  ASSERT_TRUE(choice.ok());
  auto m = (*choice)->NewMatcher();
  EXPECT_TRUE(m->AcceptToken('n'));
  EXPECT_FALSE(m->AcceptToken('y'));
  EXPECT_TRUE(m->AcceptToken('o'));
  EXPECT_TRUE(m->IsComplete());
  EXPECT_FALSE(so.Choice({}).ok());
  EXPECT_FALSE(so.Regex("(a").ok());
  EXPECT_TRUE(so.JsonObject().ok());
}

}  // namespace
}  // namespace tessera::structured
