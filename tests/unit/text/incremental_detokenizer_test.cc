#include "text/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "text/utf8.h"
#include "tests/unit/text/tokenizer_test_util.h"

namespace tessera::text {
namespace {

using testing::kTokenizerNames;
using testing::RealTokenizer;

// Token ids whose text is an incomplete piece of a multi-byte character:
// byte-fallback tokens (<0xE4>...) and byte-level tokens that are not valid
// UTF-8 on their own.
std::vector<int32_t> SplitCharTokens(const Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < tok.vocab_size() && ids.size() < 4000; ++id) {
    auto text = tok.Decode(std::vector<int32_t>{id});
    if (!text.ok()) continue;
    if (text->find("\xEF\xBF\xBD") != std::string::npos) ids.push_back(id);
  }
  return ids;
}

std::vector<int32_t> RandomStream(std::mt19937& rng, const Tokenizer& tok, const std::vector<int32_t>& split) {
  std::uniform_int_distribution<int> len(1, 60);
  std::uniform_int_distribution<int32_t> any(0, tok.vocab_size() - 1);
  std::vector<int32_t> ids;
  const int n = len(rng);
  for (int i = 0; i < n; ++i) {
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 4 && !split.empty()) {
      ids.push_back(split[rng() % split.size()]);
    } else if (kind < 6) {
      // A real encoding of a multi-byte string, fed token by token.
      static const char* const kTexts[] = {" ünïcödé", "中文", " 👩‍👩‍👧", " don't .", " 's ,", "  \n", " ' "};
      for (int32_t t : tok.Encode(kTexts[rng() % 7], false)) ids.push_back(t);
    } else {
      ids.push_back(any(rng));
    }
  }
  return ids;
}

struct StreamResult {
  std::string text;
  bool all_valid = true;
};

StreamResult Stream(const Tokenizer& tok, const std::vector<int32_t>& ids, const DetokenizerOptions& opts) {
  IncrementalDetokenizer detok(&tok, opts);
  StreamResult r;
  for (int32_t id : ids) {
    auto chunk = detok.Step(id);
    EXPECT_TRUE(chunk.ok());
    r.all_valid = r.all_valid && IsValidUtf8(*chunk);
    r.text += *chunk;
  }
  const std::string last = detok.Finish();
  r.all_valid = r.all_valid && IsValidUtf8(last);
  r.text += last;
  return r;
}

TEST(IncrementalDetokenizerTest, ConcatenationEqualsFullDecodeOnRandomStreams) {
  for (const char* name : kTokenizerNames) {
    auto tok = RealTokenizer(name);
    if (tok == nullptr) GTEST_SKIP() << "tokenizer packages not installed";
    const std::vector<int32_t> split = SplitCharTokens(*tok);
    std::mt19937 rng(1234);
    int streams = 0;
    for (int iter = 0; iter < 400; ++iter) {
      const std::vector<int32_t> ids = RandomStream(rng, *tok, split);
      for (bool skip : {false, true}) {
        DetokenizerOptions opts;
        opts.decode.skip_special_tokens = skip;
        const StreamResult r = Stream(*tok, ids, opts);
        const std::string full = *tok->Decode(ids, opts.decode);
        ASSERT_EQ(r.text, full) << name << " stream " << iter << " skip=" << skip;
        ASSERT_TRUE(r.all_valid) << name;
        ++streams;
      }
    }
    EXPECT_EQ(streams, 800);
  }
}

TEST(IncrementalDetokenizerTest, EmitsStableTextEarly) {
  auto tok = RealTokenizer("llama3");
  if (tok == nullptr) GTEST_SKIP();
  IncrementalDetokenizer detok(tok.get(), {});
  std::string out;
  for (int32_t id : tok->Encode("Hello world, this is streaming", false)) out += *detok.Step(id);
  // Everything but (at most) a trailing held piece is already out.
  EXPECT_EQ(out, "Hello world, this is streaming");
  EXPECT_EQ(detok.Finish(), "");
}

TEST(IncrementalDetokenizerTest, StopStringsAcrossTokenBoundaries) {
  for (const char* name : kTokenizerNames) {
    auto tok = RealTokenizer(name);
    if (tok == nullptr) GTEST_SKIP();
    const std::vector<int32_t> split = SplitCharTokens(*tok);
    std::mt19937 rng(99);
    for (int iter = 0; iter < 300; ++iter) {
      const std::vector<int32_t> ids = RandomStream(rng, *tok, split);
      const std::string full = *tok->Decode(ids);
      if (full.size() < 4) continue;
      // Stop strings: two substrings of the full text (so they occur) and one
      // that likely does not; positions chosen on character boundaries.
      DetokenizerOptions opts;
      for (int k = 0; k < 2; ++k) {
        size_t b = rng() % full.size();
        while (b > 0 && (static_cast<uint8_t>(full[b]) & 0xC0) == 0x80) --b;
        size_t e = std::min(full.size(), b + 1 + rng() % 6);
        while (e < full.size() && (static_cast<uint8_t>(full[e]) & 0xC0) == 0x80) ++e;
        opts.stop.push_back(full.substr(b, e - b));
      }
      opts.stop.push_back("\x01never\x02");
      // Expected: cut at the match that ends first (ties: starts first).
      size_t best_end = std::string::npos, best_start = 0;
      for (const std::string& s : opts.stop) {
        const size_t p = full.find(s);
        if (p == std::string::npos) continue;
        if (p + s.size() < best_end || (p + s.size() == best_end && p < best_start)) {
          best_end = p + s.size();
          best_start = p;
        }
      }
      ASSERT_NE(best_end, std::string::npos);
      const StreamResult r = Stream(*tok, ids, opts);
      ASSERT_EQ(r.text, full.substr(0, best_start)) << name << " iter " << iter;
      ASSERT_TRUE(r.all_valid);
    }
  }
}

TEST(IncrementalDetokenizerTest, WithheldTextIsNotLeakedAndStopEndsStream) {
  auto tok = RealTokenizer("qwen3");
  if (tok == nullptr) GTEST_SKIP();
  DetokenizerOptions opts;
  opts.stop = {"<|im_end|>", "STOP"};
  IncrementalDetokenizer detok(tok.get(), opts);
  std::string out;
  for (int32_t id : tok->Encode("abc ST", false)) out += *detok.Step(id);
  EXPECT_EQ(out, "abc ");  // "ST" is held: it may start "STOP"
  for (int32_t id : tok->Encode("OP tail", false)) out += *detok.Step(id);
  EXPECT_TRUE(detok.stopped());
  EXPECT_EQ(out, "abc ");
  EXPECT_EQ(*detok.matched_stop(), "STOP");
  EXPECT_EQ(*detok.Step(5), "");
  EXPECT_EQ(detok.Finish(), "");
}

}  // namespace
}  // namespace tessera::text
