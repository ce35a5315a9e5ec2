// The harmony parser (gpt-oss): channels to reasoning / content / tool calls,
// whole and split at every byte (streamed == whole), and the prompt's open
// message deciding where the output starts.
#include "server/openai/tool_calls/harmony_parser.h"

#include <gtest/gtest.h>

#include <iterator>
#include <random>

namespace tessera::openai::tools {
namespace {

struct Result {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;
  bool operator==(const Result&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Result& r) {
  os << "reasoning=\"" << r.reasoning << "\" content=\"" << r.content << "\" calls=[";
  for (const auto& [n, a] : r.calls) os << n << "(" << a << ") ";
  return os << "]";
}

void Collect(HarmonyOutput o, Result* r) {
  r->reasoning += o.reasoning;
  r->content += o.text.content;
  for (const ToolCall& c : o.text.calls) r->calls.emplace_back(c.name, c.arguments);
}

Result Parse(std::string_view header, bool tools, const std::vector<std::string>& pieces) {
  HarmonyParser p(header, tools);
  Result r;
  for (const std::string& piece : pieces) {
    HarmonyOutput o;
    p.Feed(piece, &o);
    Collect(std::move(o), &r);
  }
  HarmonyOutput o;
  p.Finish(&o);
  Collect(std::move(o), &r);
  return r;
}

constexpr std::string_view kGenPrompt = "<|start|>assistant";

void Expect(const std::string& text, const Result& want, std::string_view header = kGenPrompt, bool tools = true) {
  EXPECT_EQ(Parse(header, tools, {text}), want) << "whole: " << text;
  for (size_t i = 0; i <= text.size(); ++i) {
    EXPECT_EQ(Parse(header, tools, {text.substr(0, i), text.substr(i)}), want) << "split at " << i << ": " << text;
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  EXPECT_EQ(Parse(header, tools, bytes), want) << "byte by byte: " << text;
}

TEST(HarmonyParserTest, AnalysisThenFinal) {
  Expect("<|channel|>analysis<|message|>User asks 2+2. Easy.<|end|><|start|>assistant<|channel|>final<|message|>"
         "4<|return|>",
         {"User asks 2+2. Easy.", "4", {}});
  // The stop token usually does not reach the text: the body ends with the output.
  Expect("<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|> a\n b ",
         {"think", " a\n b ", {}});
  Expect("<|channel|>final<|message|>only an answer", {"", "only an answer", {}});
  // Two analysis messages and a preamble (commentary without a recipient) -> content.
  Expect("<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|>"
         "<|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>",
         {"ab", "Let me check.", {}});
}

TEST(HarmonyParserTest, ToolCallsWithTheRecipientOnEitherSide) {
  const Result want{"need weather", "", {{"get_weather", R"({"city":"Paris"})"}}};
  Expect("<|channel|>analysis<|message|>need weather<|end|><|start|>assistant<|channel|>commentary "
         "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>",
         want);
  Expect("<|channel|>analysis<|message|>need weather<|end|><|start|>assistant to=functions.get_weather"
         "<|channel|>commentary json<|message|>{\"city\": \"Paris\"}",
         want);
  // Two calls in one turn, the second after a preamble; the recipient in the generation prompt's header.
  Expect(" to=functions.a<|channel|>commentary<|message|>{}<|call|><|start|>assistant<|channel|>commentary"
         "<|message|>and<|end|><|start|>assistant<|channel|>commentary to=functions.b<|message|>{\"x\":[1, 2]}",
         {"", "and", {{"a", "{}"}, {"b", R"({"x":[1,2]})"}}});
}

TEST(HarmonyParserTest, WhatIsNotACallIsContentVerbatim) {
  // Arguments that are not a JSON object.
  Expect("<|channel|>commentary to=functions.f<|message|>[1]<|call|>",
         {"", "<|channel|>commentary to=functions.f<|message|>[1]<|call|>", {}});
  Expect("<|channel|>commentary to=functions.f<|message|>{\"a\":", {"", "<|channel|>commentary to=functions.f<|message|>{\"a\":", {}});
  // A built-in tool's recipient, and function calls while the request parses no tools.
  Expect("<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>analysis to=browser.search<|message|>"
         "{\"q\":1}<|call|>",
         {"r", "<|start|>assistant<|channel|>analysis to=browser.search<|message|>{\"q\":1}<|call|>", {}});
  Expect("<|channel|>commentary to=functions.f<|message|>{}<|call|>",
         {"", "<|channel|>commentary to=functions.f<|message|>{}<|call|>", {}}, kGenPrompt, /*tools=*/false);
  // Text outside any message, a header cut short, and an unfinished header.
  Expect("<|channel|>final<|message|>x<|end|> stray <|end|>", {"", "x stray <|end|>", {}});
  Expect("<|channel|>final<|end|>y", {"", "<|channel|>final<|end|>y", {}});
  Expect("<|channel|>fin", {"", "<|channel|>fin", {}});
  Expect("<|channel|>final<|message|>a <|ret", {"", "a <|ret", {}});
  // An unterminated message cut short by the next one.
  Expect("<|channel|>analysis<|message|>a<|start|>assistant<|channel|>final<|message|>b", {"a", "b", {}});
  Expect("<|channel|>commentary to=functions.f<|message|>{}<|start|>assistant<|channel|>final<|message|>b",
         {"", "b", {{"f", "{}"}}});
  // Another role's message is not the assistant's.
  Expect("<|channel|>final<|message|>a<|end|><|start|>user<|message|>hi<|end|>",
         {"", "a<|start|>user<|message|>hi<|end|>", {}});
}

TEST(HarmonyParserTest, ThePromptDecidesWhereTheOutputStarts) {
  // Between messages: plain text is content, a full message is parsed.
  Expect("plain <|start|>assistant<|channel|>final<|message|>x<|return|>", {"", "plain x", {}}, "");
  // Inside an open body (continue_final_message): the output continues it.
  Expect(" more<|end|>", {"", " more", {}}, "<|start|>assistant<|channel|>final<|message|>");
  Expect(" more<|end|><|start|>assistant<|channel|>final<|message|>z", {" more", "z", {}},
         "<|start|>assistant<|channel|>analysis<|message|>");

  EXPECT_EQ(HarmonyOpenHeader("<|start|>user<|message|>hi<|end|><|start|>assistant"), "<|start|>assistant");
  EXPECT_EQ(HarmonyOpenHeader("<|start|>user<|message|>hi<|end|>"), "");
  EXPECT_EQ(HarmonyOpenHeader("no harmony here"), "");
  EXPECT_EQ(HarmonyOpenHeader("<|end|><|start|>assistant<|channel|>final<|message|>Sure, "),
            "<|start|>assistant<|channel|>final<|message|>");
}

// Random sequences of harmony's pieces: split at every point == whole (what
// the fuzz target checks on arbitrary bytes, here over the format's own words).
TEST(HarmonyParserTest, RandomMarkupStreamsAsItParsesWhole) {
  static constexpr const char* kPieces[] = {
      "<|start|>", "assistant", "user", "<|channel|>", "analysis", "final", "commentary", " to=functions.f",
      " to=browser.x", "<|constrain|>", "json", "<|message|>", "<|end|>", "<|call|>", "<|return|>", "{\"a\": 1}",
      "{", "}", " ", "x", "<|", "|>", "<|ret"};
  std::mt19937 rng(7);
  for (int n = 0; n < 300; ++n) {
    std::string text;
    const int len = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < len; ++i) text += kPieces[rng() % std::size(kPieces)];
    const std::string_view header = n % 3 == 0 ? "" : n % 3 == 1 ? kGenPrompt : "<|start|>assistant<|message|>";
    const Result whole = Parse(header, n % 2 == 0, {text});
    for (size_t i = 0; i <= text.size(); ++i) {
      ASSERT_EQ(Parse(header, n % 2 == 0, {text.substr(0, i), text.substr(i)}), whole) << "split at " << i << ": " << text;
    }
  }
}

}  // namespace
}  // namespace tessera::openai::tools
