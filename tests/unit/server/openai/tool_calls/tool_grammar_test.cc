// The grammar forcing tool calls (tool_choice "required" / named): what it
// accepts is parsed back into calls by the request's own output parser, in
// each format; per-tool schema errors name the tool's field.
#include "server/openai/tool_calls/tool_grammar.h"

#include <gtest/gtest.h>

#include "server/openai/tool_calls/chat_output.h"
#include "structured/gbnf.h"
#include "structured/matcher.h"

namespace tessera::openai::tools {
namespace {

const Json kTools = Json::parse(R"([
  {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
     "properties":{"city":{"type":"string","enum":["Paris","Rome"]},"days":{"type":"integer"}},"required":["city"]}}},
  {"type":"function","function":{"name":"now"}}])");

std::shared_ptr<const structured::TokenVocab> ByteVocab() {
  std::vector<std::optional<std::string>> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  return structured::TokenVocab::Create(std::move(v));
}

std::shared_ptr<const structured::CompiledGrammar> Grammar(const ToolGrammarOptions& o) {
  std::string gbnf;
  auto err = ToolCallGrammar(kTools, o, structured::CompileLimits{}, &gbnf);
  EXPECT_FALSE(err) << err->message;
  auto g = structured::ParseGbnf(gbnf, structured::CompileLimits{},
                                 std::chrono::steady_clock::now() + std::chrono::seconds(10));
  EXPECT_TRUE(g.ok()) << g.status().ToString() << "\n" << gbnf;
  return std::make_shared<const structured::CompiledGrammar>(std::move(*g), ByteVocab());
}

bool Accepts(const std::shared_ptr<const structured::CompiledGrammar>& g, const std::string& text) {
  structured::GrammarMatcher m(g);
  return m.AcceptBytes(text) && m.CanEnd();
}

// The calls the request's own parser reads out of `text` (name, arguments JSON).
std::vector<std::pair<std::string, Json>> Parse(const ToolGrammarOptions& o, const std::string& text) {
  ChatOutputOptions out;
  out.tool_choice = o.choice;
  out.tool_parser = o.parser;
  out.parallel_tool_calls = o.parallel_tool_calls;
  ChatOutputParser parser(out, [] { return std::string("call_x"); });
  ChatOutputDelta d = parser.Feed(text);
  d.Append(parser.Finish());
  EXPECT_EQ(d.content, "") << text;
  std::vector<std::pair<std::string, Json>> calls;
  for (const auto& c : d.tool_calls) calls.emplace_back(c.call.name, Json::parse(c.call.arguments));
  return calls;
}

using Calls = std::vector<std::pair<std::string, Json>>;
const Calls kTwo = {{"get_weather", Json::parse(R"({"city":"Rome","days":3})")}, {"now", Json::object()}};

TEST(ToolGrammarTest, HermesRequiredParallel) {
  ToolGrammarOptions o{.choice = {ToolChoiceMode::kRequired, ""}, .parser = ToolParserKind::kHermes};
  auto g = Grammar(o);
  const std::string two = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 3}}"
                          "\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(Accepts(g, two));
  EXPECT_EQ(Parse(o, two), kTwo);
  EXPECT_FALSE(Accepts(g, ""));  // at least one call
  EXPECT_FALSE(Accepts(g, "Sure. " + two));
  EXPECT_FALSE(Accepts(g, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 3}}\n</tool_call>"));
  o.parallel_tool_calls = false;
  EXPECT_FALSE(Accepts(Grammar(o), two));
  EXPECT_TRUE(Accepts(Grammar(o), "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
}

TEST(ToolGrammarTest, NamedAllowsOneCallToThatFunction) {
  for (ToolParserKind p : {ToolParserKind::kHermes, ToolParserKind::kLlama3Json, ToolParserKind::kNone}) {
    ToolGrammarOptions o{.choice = {ToolChoiceMode::kNamed, "now"}, .parser = p};
    auto g = Grammar(o);
    const std::string one = p == ToolParserKind::kHermes     ? "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"
                            : p == ToolParserKind::kLlama3Json ? "{\"name\": \"now\", \"parameters\": {}}"
                                                              : "{}";
    EXPECT_TRUE(Accepts(g, one)) << one;
    EXPECT_EQ(Parse(o, one), (Calls{{"now", Json::object()}}));
    EXPECT_FALSE(Accepts(g, one + (p == ToolParserKind::kHermes ? "\n" + one : "; " + one)));
  }
}

TEST(ToolGrammarTest, Llama3AndJsonFormats) {
  ToolGrammarOptions o{.choice = {ToolChoiceMode::kRequired, ""}, .parser = ToolParserKind::kLlama3Json};
  const std::string l3 = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\", \"days\": 3}}; "
                         "{\"name\": \"now\", \"parameters\": {}}";
  EXPECT_TRUE(Accepts(Grammar(o), l3));
  EXPECT_EQ(Parse(o, l3), kTwo);
  for (ToolParserKind p : {ToolParserKind::kNone, ToolParserKind::kMistral}) {
    o.parser = p;  // mistral's [TOOL_CALLS] is a special token: vLLM's plain JSON array instead
    const std::string arr = "[{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\", \"days\": 3}}, "
                            "{\"name\": \"now\", \"parameters\": {}}]";
    EXPECT_TRUE(Accepts(Grammar(o), arr));
    EXPECT_EQ(Parse(o, arr), kTwo);
    EXPECT_FALSE(Accepts(Grammar(o), "[]"));
  }
}

TEST(ToolGrammarTest, ClosesAnOpenThinkBlock) {
  ToolGrammarOptions o{.choice = {ToolChoiceMode::kNamed, "now"}, .parser = ToolParserKind::kHermes, .close_think = true};
  EXPECT_TRUE(Accepts(Grammar(o), "</think>\n\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(Accepts(Grammar(o), "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>"));
}

TEST(ToolGrammarTest, BadParametersSchemaNamesTheTool) {
  Json tools = kTools;
  tools[1]["function"]["parameters"] = Json::parse(R"({"type":"object","properties":{"x":{"not":{"type":"null"}}}})");
  std::string gbnf;
  auto err = ToolCallGrammar(tools, {.choice = {ToolChoiceMode::kRequired, ""}}, structured::CompileLimits{}, &gbnf);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->param, "tools[1].function.parameters");
  EXPECT_EQ(err->status, ApiStatus::kBadRequest);
  // Named: only the named tool's schema matters.
  EXPECT_FALSE(ToolCallGrammar(tools, {.choice = {ToolChoiceMode::kNamed, "get_weather"}}, structured::CompileLimits{},
                               &gbnf));
}

}  // namespace
}  // namespace tessera::openai::tools
