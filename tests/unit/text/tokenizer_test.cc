#include "text/tokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "text/regex.h"
#include "text/utf8.h"
#include "tests/unit/text/tokenizer_test_util.h"

namespace tessera::text {
namespace {

using testing::kTokenizerNames;
using testing::RealTokenizer;

// A tiny byte-level BPE tokenizer.json for structural tests.
std::string TinyTokenizerJson(const std::string& pre_tokenizer, const std::string& added = "[]",
                              const std::string& merges = R"(["a b", ["ab", "c"]])") {
  return R"({"version": "1.0", "added_tokens": )" + added + R"(, "normalizer": null, "pre_tokenizer": )" +
         pre_tokenizer +
         R"(, "post_processor": null, "decoder": {"type": "ByteLevel"},
     "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "Ġ": 5, "d": 6, "1": 7, "2": 8},
               "merges": )" + merges + "}}";
}

TEST(TokenizerTest, LoadsAllSixRealTokenizers) {
  for (const char* name : kTokenizerNames) {
    auto tok = RealTokenizer(name);
    if (tok == nullptr) GTEST_SKIP() << "tokenizer packages not installed";
    EXPECT_GT(tok->vocab_size(), 30000) << name;
    EXPECT_TRUE(tok->eos_token_id().has_value()) << name;
  }
}

TEST(TokenizerTest, KnownEncodings) {
  auto llama3 = RealTokenizer("llama3_1");
  auto llama2 = RealTokenizer("llama2");
  if (llama3 == nullptr || llama2 == nullptr) GTEST_SKIP();
  EXPECT_EQ(llama3->Encode("Hello world"), (std::vector<int32_t>{128000, 9906, 1917}));
  EXPECT_EQ(llama3->Encode("Hello world", false), (std::vector<int32_t>{9906, 1917}));
  // Ids as produced by transformers.js for this tokenizer.json.
  EXPECT_EQ(llama2->Encode("Hello world"), (std::vector<int32_t>{1, 22557, 1526}));
  EXPECT_EQ(*llama2->Decode(std::vector<int32_t>{1, 22557, 1526}, {.skip_special_tokens = true}), "Hello world");
  EXPECT_EQ(*llama2->Decode(std::vector<int32_t>{1, 22557, 1526}), "<s> Hello world");
}

TEST(TokenizerTest, RoundTripsByteLevel) {
  std::mt19937 rng(7);
  const std::string samples[] = {"plain text", "  spaces\t\ttabs\r\n", "中文 日本語 한국어", "emoji 👩‍👩‍👧‍👦👍🏽",
                                 "code: for (i = 0; i < n; ++i) {}", "<|im_end|> inside text"};
  for (const char* name : {"llama3", "qwen3", "deepseek_v3"}) {
    auto tok = RealTokenizer(name);
    if (tok == nullptr) GTEST_SKIP();
    for (const std::string& s : samples) {
      auto ids = tok->Encode(s, false);
      EXPECT_EQ(*tok->Decode(ids), s) << name;
    }
  }
}

TEST(TokenizerTest, InvalidUtf8IsReplacedWithFffd) {
  for (const char* name : kTokenizerNames) {
    auto tok = RealTokenizer(name);
    if (tok == nullptr) GTEST_SKIP();
    // Lone continuation, truncated 3-byte sequence, overlong, surrogate.
    const std::string bad = "a\x80z \xE4\xB8 x \xC0\xAF \xED\xA0\x80!";
    const std::string fixed = "a\uFFFDz \uFFFD x \uFFFD\uFFFD \uFFFD\uFFFD\uFFFD!";
    EXPECT_EQ(RepairUtf8(bad), fixed);
    EXPECT_EQ(tok->Encode(bad), tok->Encode(fixed)) << name;
    EXPECT_TRUE(IsValidUtf8(*tok->Decode(tok->Encode(bad))));
  }
}

TEST(TokenizerTest, TenMegabytesEncodeWithoutBlowup) {
  auto tok = RealTokenizer("llama3");
  if (tok == nullptr) GTEST_SKIP();
  std::string big;
  const std::string para = "The quick brown fox jumps over 12345 lazy dogs; 中文文本 and emoji 😀.\n  \t";
  while (big.size() < 10 * 1024 * 1024) big += para;
  auto ids = tok->Encode(big, false);
  EXPECT_GT(ids.size(), big.size() / 8);
  EXPECT_EQ(*tok->Decode(ids), big);
  // One 1 MB "word" and 1 MB of whitespace: a single pre-token each.
  const std::string word(1024 * 1024, 'a'), spaces(1024 * 1024, ' ');
  EXPECT_EQ(*tok->Decode(tok->Encode(word, false)), word);
  EXPECT_EQ(*tok->Decode(tok->Encode(spaces + "x", false)), spaces + "x");
}

TEST(TokenizerTest, DecodeRejectsUnknownIds) {
  auto tok = RealTokenizer("qwen3");
  if (tok == nullptr) GTEST_SKIP();
  EXPECT_FALSE(tok->Decode(std::vector<int32_t>{1, -1}).ok());
  EXPECT_FALSE(tok->Decode(std::vector<int32_t>{tok->vocab_size()}).ok());
}

TEST(TokenizerTest, MergesInBothFormsAndTinyPipeline) {
  auto t1 = Tokenizer::FromJson(TinyTokenizerJson("null"), "");
  ASSERT_TRUE(t1.ok()) << t1.status().ToString();
  EXPECT_EQ((*t1)->Encode("abcab"), (std::vector<int32_t>{4, 3}));
  EXPECT_EQ(*(*t1)->Decode(std::vector<int32_t>{4, 3}), "abcab");
}

TEST(TokenizerTest, AddedTokenStripAndSingleWord) {
  const std::string added =
      R"([{"id": 9, "content": "<x>", "special": true, "lstrip": true, "rstrip": true, "normalized": false},
          {"id": 10, "content": "ab", "special": false, "single_word": true, "normalized": false}])";
  auto t = Tokenizer::FromJson(TinyTokenizerJson("null", added), "");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // Whitespace around <x> is absorbed.
  EXPECT_EQ((*t)->Encode("a  <x>  b"), (std::vector<int32_t>{0, 9, 1}));
  // "ab" as a single word matches; inside "cabd" it does not.
  // (Spaces are not in this vocab and there is no unk/byte fallback: dropped.)
  EXPECT_EQ((*t)->Encode("c ab d"), (std::vector<int32_t>{2, 10, 6}));
  for (int32_t id : (*t)->Encode("cabd")) EXPECT_NE(id, 10);
  EXPECT_EQ(*(*t)->Decode(std::vector<int32_t>{0, 9, 1}, {.skip_special_tokens = true}), "ab");
}

TEST(TokenizerTest, SplitBehaviorsAndDigits) {
  const std::string seq = R"({"type": "Sequence", "pretokenizers": [
      {"type": "Digits", "individual_digits": true},
      {"type": "Split", "pattern": {"String": "c"}, "behavior": "MergedWithPrevious", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";
  auto t = Tokenizer::FromJson(TinyTokenizerJson(seq), "");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // "12" splits into digits; "abcab" splits after "c" so "abc" and "ab".
  EXPECT_EQ((*t)->Encode("12abcab"), (std::vector<int32_t>{7, 8, 4, 3}));
}

TEST(TokenizerTest, MalformedFilesNameThePart) {
  auto expect_error = [](const std::string& json, const std::string& fragment) {
    auto t = Tokenizer::FromJson(json, "");
    ASSERT_FALSE(t.ok()) << "expected failure containing: " << fragment;
    EXPECT_NE(t.status().message().find(fragment), std::string::npos) << t.status().message();
  };
  expect_error(TinyTokenizerJson(R"({"type": "Sequence", "pretokenizers": [{"type": "Digits"}, {"type": "Whitespace"}]})"),
               "tokenizer.json: pre_tokenizer.pretokenizers[1]: unsupported type 'Whitespace'");
  expect_error(TinyTokenizerJson(R"({"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"})"),
               "tokenizer.json: pre_tokenizer.pattern: regex '(unclosed'");
  expect_error(TinyTokenizerJson("null", "[]", R"(["a b", "zz q"])"), "tokenizer.json: model.merges[1]: token 'zz'");
  expect_error(TinyTokenizerJson("null", "[]", R"([42])"), "model.merges[0]: expected a string or a [left, right] pair");
  expect_error(R"({"model": {"type": "Unigram", "vocab": []}})", "tokenizer.json: model: unsupported type 'Unigram'");
  expect_error(R"({"added_tokens": []})", "tokenizer.json: missing field 'model'");
  expect_error("{not json", "tokenizer.json: not valid JSON");
  std::string with_decoder = TinyTokenizerJson("null");
  with_decoder.replace(with_decoder.find(R"({"type": "ByteLevel"})"), 21, R"({"type": "CTC"})");
  expect_error(with_decoder, "tokenizer.json: decoder: unsupported type 'CTC'");
}

TEST(TokenizerTest, RegexRewriteMatchesOracleConventions) {
  EXPECT_EQ(RewritePatternForPcre2("(?i:'s|'t)"), "(?:'[sS]|'[tT])");
  auto re = Regex::Compile("(?i:'s)|\\s+");
  ASSERT_TRUE(re.ok());
  std::vector<std::string> got;
  const std::string subject = "'S'\xC5\xBF\xC2\x85\xEF\xBB\xBF";  // 'S, 'ſ, U+0085, U+FEFF
  (*re)->ForEachMatch(subject, [&](size_t b, size_t e) { got.push_back(subject.substr(b, e - b)); });
  // ſ does not fold to s; U+0085 is not whitespace, U+FEFF is (ECMAScript \s).
  EXPECT_EQ(got, (std::vector<std::string>{"'S", "\xEF\xBB\xBF"}));
}

TEST(Utf8Test, CompletePrefixAndNormalization) {
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE4\xB8"), 2u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\xE4\xB8\xAD"), 5u);
  EXPECT_EQ(CompleteUtf8Prefix("ab\x80"), 3u);
  EXPECT_EQ(Normalize("e\xCC\x81", NormalForm::kNfc), "\xC3\xA9");
  EXPECT_EQ(Normalize("\xEF\xAC\x81", NormalForm::kNfkc), "fi");
}

}  // namespace
}  // namespace tessera::text
