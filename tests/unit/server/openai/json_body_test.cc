// ParseJsonBounded: same documents as nlohmann's parser, key order kept,
// limits refused with a message naming them, and linear time on shapes that
// made ordered_json's own parser quadratic.
#include "server/openai/json_body.h"

#include <algorithm>
#include <chrono>
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

// Linear, not quadratic, in the number of keys: 10x the keys must cost far
// less than the 100x a per-key search over the object would (ordered_json's
// own parser). A complexity check with a wide margin, not a speed claim.
double ParseSeconds(int keys) {
  std::string text = "{";
  for (int i = 0; i < keys; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  text += "}";
  Json got;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(ParseJsonBounded(text, {.max_object_keys = 1 << 20}, &got));
  EXPECT_EQ(got.size(), static_cast<size_t>(keys));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(JsonBodyTest, ManyKeysParseInLinearTime) {
  double small = 1e9, large = 1e9;
  for (int rep = 0; rep < 3; ++rep) {  // best of 3 against a busy machine
    small = std::min(small, ParseSeconds(20000));
    large = std::min(large, ParseSeconds(200000));
  }
  EXPECT_LT(large, 35 * small + 0.05) << "20k keys " << small << " s, 200k keys " << large << " s";
}

}  // namespace
}  // namespace tessera::openai
