// Tool-call parsers: whole-output results, and the same result however the
// output is split into streamed pieces (every split point, and byte by byte).
#include "server/openai/tool_calls/tool_call_parser.h"

#include <gtest/gtest.h>

#include "text/chat_template.h"

namespace tessera::openai::tools {
namespace {

struct Result {
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  bool operator==(const Result&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Result& r) {
  os << "content=\"" << r.content << "\" calls=[";
  for (const auto& [n, a] : r.calls) os << n << "(" << a << ") ";
  return os << "]";
}

void Collect(const ParsedText& p, Result* r, std::vector<std::string>* contents = nullptr) {
  r->content += p.content;
  if (contents && !p.content.empty()) contents->push_back(p.content);
  for (const ToolCall& c : p.calls) r->calls.emplace_back(c.name, c.arguments);
}

Result ParsePieces(ToolCallParser* parser, const std::vector<std::string>& pieces,
                   std::vector<std::string>* contents = nullptr) {
  Result r;
  for (const std::string& piece : pieces) {
    ParsedText p;
    parser->Feed(piece, &p);
    Collect(p, &r, contents);
  }
  ParsedText p;
  parser->Finish(&p);
  Collect(p, &r, contents);
  return r;
}

using Factory = std::unique_ptr<ToolCallParser> (*)();

// Whole, split at every point, and byte by byte: all equal to `want`.
void ExpectParses(Factory make, const std::string& text, const Result& want) {
  EXPECT_EQ(ParsePieces(make().get(), {text}), want) << "whole: " << text;
  for (size_t i = 0; i <= text.size(); ++i) {
    EXPECT_EQ(ParsePieces(make().get(), {text.substr(0, i), text.substr(i)}), want) << "split at " << i;
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  EXPECT_EQ(ParsePieces(make().get(), bytes), want) << "byte by byte";
}

std::unique_ptr<ToolCallParser> Hermes() { return MakeToolCallParser(ToolParserKind::kHermes); }
std::unique_ptr<ToolCallParser> Llama3() { return MakeToolCallParser(ToolParserKind::kLlama3Json); }
std::unique_ptr<ToolCallParser> Mistral() { return MakeToolCallParser(ToolParserKind::kMistral); }
std::unique_ptr<ToolCallParser> Required() { return MakeRequiredToolCallParser(); }
std::unique_ptr<ToolCallParser> NamedF() { return MakeNamedToolCallParser("f"); }
std::unique_ptr<ToolCallParser> DeepSeekV3() { return MakeToolCallParser(ToolParserKind::kDeepSeekV3); }

TEST(HermesParserTest, QwenStyleCallsAndText) {
  ExpectParses(Hermes,
               "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
               "\"days\": [1, 2]}}\n</tool_call>\n<tool_call>\n{\"name\": \"time\", \"arguments\": {}}\n</tool_call>",
               {"Let me check.", {{"get_weather", R"({"city":"Paris","days":[1,2]})"}, {"time", "{}"}}});
}

TEST(HermesParserTest, PlainTextIsUntouched) {
  ExpectParses(Hermes, "  Hello <tool world> a < b \n\n", {"  Hello <tool world> a < b \n\n", {}});
  ExpectParses(Hermes, "", {"", {}});
  ExpectParses(Hermes, "ends with <tool_ca", {"ends with <tool_ca", {}});
}

TEST(HermesParserTest, TextAfterCallsAndBraceInStrings) {
  // The close tag inside a string ends the call early: invalid JSON -> all text.
  const std::string early = "<tool_call>{\"name\":\"f\",\"arguments\":{\"s\":\"}</tool_call> \\\"x\"}}</tool_call>\n\nDone.";
  ExpectParses(Hermes, early, {early, {}});
  ExpectParses(Hermes, "<tool_call>{\"name\":\"f\",\"arguments\":{\"s\":\"a}b\"}}</tool_call>\n\nDone.",
               {"Done.", {{"f", R"({"s":"a}b"})"}}});
}

TEST(HermesParserTest, MalformedCallsAreContentVerbatim) {
  ExpectParses(Hermes, "a<tool_call>{not json}</tool_call>b", {"a<tool_call>{not json}</tool_call>b", {}});
  ExpectParses(Hermes, "<tool_call>{\"arguments\": {}}</tool_call>", {"<tool_call>{\"arguments\": {}}</tool_call>", {}});
  ExpectParses(Hermes, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",
               {"<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", {}});
  // Unfinished call at the end of output: text, unless its JSON is complete.
  ExpectParses(Hermes, "x <tool_call>{\"name\": \"f\", \"argu", {"x <tool_call>{\"name\": \"f\", \"argu", {}});
  ExpectParses(Hermes, "<tool_call>{\"name\": \"f\", \"parameters\": {\"a\": 1}}\n", {"", {{"f", R"({"a":1})"}}});
}

TEST(HermesParserTest, ContentIsReleasedAsItStreams) {
  std::vector<std::string> contents;
  auto p = Hermes();
  ParsedText out;
  p->Feed("Hello wor", &out);
  EXPECT_EQ(out.content, "Hello wor");
  out = {};
  p->Feed("ld <tool", &out);
  EXPECT_EQ(out.content, "ld");  // " <tool" may start a call: held
  out = {};
  p->Feed("_call>{\"name\":\"f\"}", &out);
  EXPECT_EQ(out.content, "");
  EXPECT_TRUE(out.calls.empty());
  p->Feed("</tool_call>", &out);
  ASSERT_EQ(out.calls.size(), 1u);
  EXPECT_EQ(out.calls[0].arguments, "{}");
}

TEST(Llama3JsonParserTest, CallsWithPythonTagOrBrace) {
  ExpectParses(Llama3, "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"x\"}}",
               {"", {{"search", R"({"q":"x"})"}}});
  ExpectParses(Llama3, " {\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": {\"k\": [1]}}",
               {"", {{"a", "{}"}, {"b", R"({"k":[1]})"}}});
  ExpectParses(Llama3, "{\"name\": \"a\", \"parameters\": {}} and then text", {"and then text", {{"a", "{}"}}});
}

TEST(Llama3JsonParserTest, TextAndInvalid) {
  ExpectParses(Llama3, "The answer is {42}.", {"The answer is {42}.", {}});
  ExpectParses(Llama3, "{\"x\": 1} is JSON", {"{\"x\": 1} is JSON", {}});
  ExpectParses(Llama3, "{\"name\": \"a\", \"param", {"{\"name\": \"a\", \"param", {}});
  ExpectParses(Llama3, "<|python_ta", {"<|python_ta", {}});
  ExpectParses(Llama3, "\n\n", {"\n\n", {}});
}

TEST(MistralParserTest, ArrayAndArgsFormats) {
  ExpectParses(Mistral,
               "Sure. [TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, {\"name\": \"b\", \"arguments\": {}}]",
               {"Sure.", {{"a", R"({"x":1})"}, {"b", "{}"}}});
  ExpectParses(Mistral, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]t[ARGS]{}",
               {"", {{"get_weather", R"({"city":"Paris"})"}, {"t", "{}"}}});
}

TEST(MistralParserTest, TextAndInvalid) {
  ExpectParses(Mistral, "no calls [TOOL", {"no calls [TOOL", {}});
  ExpectParses(Mistral, "[TOOL_CALLS] hello", {"[TOOL_CALLS] hello", {}});
  ExpectParses(Mistral, "[TOOL_CALLS][{\"name\": 1}] x", {"[TOOL_CALLS][{\"name\": 1}] x", {}});
  ExpectParses(Mistral, "[TOOL_CALLS]f[ARGS]{\"a\":", {"[TOOL_CALLS]f[ARGS]{\"a\":", {}});
  ExpectParses(Mistral, "[TOOL_CALLS]f[AR", {"[TOOL_CALLS]f[AR", {}});
  const std::string long_name = "[TOOL_CALLS]" + std::string(300, 'a') + "[ARGS]{}";
  ExpectParses(Mistral, long_name, {long_name, {}});
}

TEST(ForcedParserTest, RequiredArrayAndNamedObject) {
  ExpectParses(Required, "[{\"name\": \"a\", \"parameters\": {\"x\": 1}}, {\"name\": \"b\", \"parameters\": {}}]",
               {"", {{"a", R"({"x":1})"}, {"b", "{}"}}});
  ExpectParses(NamedF, " {\"x\": \"y\"} ", {"", {{"f", R"({"x":"y"})"}}});
  ExpectParses(Required, "[{\"name\": \"a\"", {"[{\"name\": \"a\"", {}});  // cut at max_tokens
  ExpectParses(Required, "[]", {"[]", {}});
  ExpectParses(NamedF, "[1]", {"[1]", {}});
  ExpectParses(Required, " \n ", {"", {}});
  ExpectParses(NamedF, "{\"x\": 1} trailing", {"trailing", {{"f", R"({"x":1})"}}});
}

// DeepSeek-V3's markup (ordinary text, fullwidth bars and U+2581 spaces).
const std::string kDsBegin = "<｜tool▁calls▁begin｜>", kDsEnd = "<｜tool▁calls▁end｜>";
const std::string kDsCall = "<｜tool▁call▁begin｜>", kDsCallEnd = "<｜tool▁call▁end｜>", kDsSep = "<｜tool▁sep｜>";

std::string DsV3Call(const std::string& name, const std::string& args) {
  return kDsCall + "function" + kDsSep + name + "\n```json\n" + args + "\n```" + kDsCallEnd;
}

TEST(DeepSeekV3ParserTest, CallsAfterText) {
  ExpectParses(DeepSeekV3, "Checking." + kDsBegin + DsV3Call("get_weather", "{\"city\": \"Paris\"}") + "\n" +
                               DsV3Call("get_time", "{}") + kDsEnd,
               {"Checking.", {{"get_weather", R"({"city":"Paris"})"}, {"get_time", "{}"}}});
  // V3.1's shorter call; the output may end before the block's end marker.
  ExpectParses(DeepSeekV3, kDsBegin + kDsCall + "f" + kDsSep + "{\"a\":1}" + kDsCallEnd,
               {"", {{"f", R"({"a":1})"}}});
  ExpectParses(DeepSeekV3, "no calls here", {"no calls here", {}});
}

TEST(DeepSeekV3ParserTest, MalformedIsContentVerbatim) {
  const std::string bad_args = kDsBegin + kDsCall + "function" + kDsSep + "f\n```json\n[1]\n```" + kDsCallEnd + kDsEnd;
  ExpectParses(DeepSeekV3, bad_args, {kDsBegin + kDsCall + "function" + kDsSep + "f\n```json\n[1]\n```" + kDsCallEnd +
                                          kDsEnd, {}});
  ExpectParses(DeepSeekV3, kDsBegin + "not a call", {kDsBegin + "not a call", {}});
  ExpectParses(DeepSeekV3, kDsBegin + kDsCall + "f" + kDsSep + "{\"a\":", {kDsBegin + kDsCall + "f" + kDsSep + "{\"a\":", {}});
  ExpectParses(DeepSeekV3, kDsBegin + kDsEnd, {kDsBegin + kDsEnd, {}});
  // A good call then a bad one: the bad one alone is text.
  ExpectParses(DeepSeekV3, kDsBegin + DsV3Call("f", "{}") + kDsCall + "x" + kDsCallEnd,
               {kDsCall + "x" + kDsCallEnd, {{"f", "{}"}}});
}

TEST(ToolParserNamesTest, NamesAndDetection) {
  EXPECT_EQ(*ToolParserFromName("openai"), ToolParserKind::kOpenAI);
  EXPECT_EQ(*ToolParserFromName("deepseek_v3"), ToolParserKind::kDeepSeekV3);
  EXPECT_EQ(MakeToolCallParser(ToolParserKind::kOpenAI), nullptr);
  EXPECT_EQ(*ToolParserFromName("hermes"), ToolParserKind::kHermes);
  EXPECT_EQ(*ToolParserFromName("llama3_json"), ToolParserKind::kLlama3Json);
  EXPECT_EQ(*ToolParserFromName("mistral"), ToolParserKind::kMistral);
  EXPECT_FALSE(ToolParserFromName("pythonic").ok());
  EXPECT_EQ(ToolParserName(ToolParserKind::kHermes), "hermes");
  auto detect = [](const std::string& src) { return DetectToolParser(*text::ChatTemplate::FromSource(src)); };
  EXPECT_EQ(detect("{{ '<tool_call>' }}{{ messages[0].content }}"), ToolParserKind::kHermes);
  EXPECT_EQ(detect("{{ '[TOOL_CALLS]' }}"), ToolParserKind::kMistral);
  EXPECT_EQ(detect("{{ '<|python_tag|>' }}"), ToolParserKind::kLlama3Json);
  EXPECT_EQ(detect("{{ '<|start|>assistant<|channel|>final<|message|>' }}"), ToolParserKind::kOpenAI);
  EXPECT_EQ(detect("{{ '<｜tool▁calls▁begin｜>' }}"), ToolParserKind::kDeepSeekV3);
  EXPECT_EQ(detect("{{ messages[0].content }}"), ToolParserKind::kNone);
}

}  // namespace
}  // namespace tessera::openai::tools
