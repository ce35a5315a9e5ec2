// tool_choice parsing (the grammar it forces: tool_grammar_test.cc).
#include "server/openai/tool_calls/tool_choice.h"

#include <gtest/gtest.h>

namespace tessera::openai::tools {
namespace {

const Json kTools = Json::parse(R"([
  {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
     "properties":{"city":{"type":"string"}},"required":["city"]}}},
  {"type":"function","function":{"name":"now"}}])");

std::optional<ApiError> Parse(const std::string& body, const Json& tools, ToolChoice* c) {
  return ParseToolChoice(Json::parse(body), tools, c);
}

TEST(ToolChoiceTest, Modes) {
  ToolChoice c;
  ASSERT_FALSE(Parse("{}", kTools, &c));
  EXPECT_EQ(c.mode, ToolChoiceMode::kAuto);
  ASSERT_FALSE(Parse("{}", Json(), &c));
  EXPECT_EQ(c.mode, ToolChoiceMode::kNone);
  ASSERT_FALSE(Parse(R"({"tool_choice":"none"})", kTools, &c));
  EXPECT_EQ(c.mode, ToolChoiceMode::kNone);
  ASSERT_FALSE(Parse(R"({"tool_choice":"required"})", kTools, &c));
  EXPECT_EQ(c.mode, ToolChoiceMode::kRequired);
  ASSERT_FALSE(Parse(R"({"tool_choice":{"type":"function","function":{"name":"now"}}})", kTools, &c));
  EXPECT_EQ(c.mode, ToolChoiceMode::kNamed);
  EXPECT_EQ(c.function_name, "now");
}

TEST(ToolChoiceTest, ErrorsNameToolChoice) {
  ToolChoice c;
  for (const char* body : {R"({"tool_choice":"maybe"})", R"({"tool_choice":7})", R"({"tool_choice":{"type":"x"}})",
                           R"({"tool_choice":{"type":"function","function":{"name":"nope"}}})"}) {
    auto e = Parse(body, kTools, &c);
    ASSERT_TRUE(e) << body;
    EXPECT_EQ(e->param.rfind("tool_choice", 0), 0u) << body << " " << e->param;
  }
  auto e = Parse(R"({"tool_choice":"required"})", Json(), &c);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->param, "tool_choice");
}

}  // namespace
}  // namespace tessera::openai::tools
