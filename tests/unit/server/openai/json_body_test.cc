// ParseJsonBounded: same documents as nlohmann's parser, key order kept,
// limits refused with a message naming them, and linear time on shapes that
// made ordered_json's own parser quadratic.
#include "server/openai/json_body.h"

#include <string>

#include <gtest/gtest.h>

namespace tessera::openai {
namespace {

using Json = nlohmann::ordered_json;

TEST(JsonBodyTest, ParsesLikeNlohmannAndKeepsKeyOrder) {
  const std::string text =
      R"({"z":1,"a":[true,false,null,-3,4.5,"s",{"b":{"c":[]}}],"m":{"y":"\u00e9","x":18446744073709551615}})";
  Json got;
  ASSERT_FALSE(ParseJsonBounded(text, {}, &got));
  EXPECT_EQ(got, Json::parse(text));
  EXPECT_EQ(got.dump(), Json::parse(text).dump());  // same key order
  EXPECT_EQ(got.begin().key(), "z");
}

TEST(JsonBodyTest, RefusesMalformedAndDuplicates) {
  Json got = 7;
  auto e = ParseJsonBounded("{\"a\":1,}", {}, &got);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("not valid JSON"), std::string::npos);
  EXPECT_EQ(got, 7);  // unchanged on error
  e = ParseJsonBounded(R"({"a":{"k":1,"k":2}})", {}, &got);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("Duplicate key \"k\""), std::string::npos);
  EXPECT_FALSE(ParseJsonBounded(R"([{"k":1},{"k":2}])", {}, &got));  // same key in sibling objects is fine
}

TEST(JsonBodyTest, LimitsNameThemselves) {
  Json got;
  JsonLimits small{.max_depth = 3, .max_object_keys = 2, .max_elements = 5};
  auto e = ParseJsonBounded("[[[[1]]]]", small, &got);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("deeper than 3"), std::string::npos) << e->message;
  e = ParseJsonBounded(R"({"a":1,"b":2,"c":3})", small, &got);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("more than 2 keys"), std::string::npos) << e->message;
  e = ParseJsonBounded("[1,2,3,4,5]", small, &got);
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("more than 5 JSON values"), std::string::npos) << e->message;
  EXPECT_FALSE(ParseJsonBounded("[[[1]]]", small, &got));
}

// 150k keys in one object (the shape that took ordered_json's own parser tens
// of seconds): parsed whole when the limit allows, in order. The time bound is
// checked end to end (tests/e2e/test_hostile.py), not here.
TEST(JsonBodyTest, ManyKeysInOneObject) {
  std::string text = "{";
  for (int i = 0; i < 150000; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  text += "}";
  Json got;
  ASSERT_FALSE(ParseJsonBounded(text, {.max_object_keys = 1 << 20}, &got));
  ASSERT_EQ(got.size(), 150000u);
  EXPECT_EQ(got.items().begin().key(), "k0");
  EXPECT_EQ(got.get_ref<const Json::object_t&>().back().first, "k149999");
  EXPECT_EQ(got["k123456"], 123456);
  EXPECT_TRUE(ParseJsonBounded(text, {}, &got));  // default: 2048 keys
}

}  // namespace
}  // namespace tessera::openai
