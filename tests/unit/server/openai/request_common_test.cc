// Shared request helpers: field readers, the Validate backstop mapping, the
// context-length error and SSE framing.
#include "server/openai/request_common.h"

#include <gtest/gtest.h>

#include "server/openai/sse.h"

namespace tessera::openai {
namespace {

TEST(RequestCommonTest, ReadIntRejectsFloatsHugeAndBool) {
  std::optional<int64_t> v;
  for (const char* body : {R"({"k":5.0})", R"({"k":1e30})", R"({"k":true})", R"({"k":18446744073709551615})",
                           R"({"k":"5"})", R"({"k":11})", R"({"k":-1})"}) {
    Json j = Json::parse(body);
    auto err = ReadInt(j, "k", "k", 0, 10, &v);
    ASSERT_TRUE(err) << body;
    EXPECT_EQ(err->param, "k");
  }
  EXPECT_FALSE(v.has_value());
  EXPECT_FALSE(ReadInt(Json::parse(R"({"k":10})"), "k", "k", 0, 10, &v));
  EXPECT_EQ(v, 10);
  EXPECT_FALSE(ReadInt(Json::parse(R"({"k":null})"), "k", "k", 0, 10, &v));
  EXPECT_EQ(v, 10);  // null leaves it unchanged
}

TEST(RequestCommonTest, ContextLengthError) {
  ApiError e = ContextLengthError(100, 20, 110, "messages");
  EXPECT_EQ(e.status, ApiStatus::kBadRequest);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(e.param, "messages");
  EXPECT_EQ(e.message,
            "This model's maximum context length is 110 tokens. However, you requested 120 tokens (100 in the "
            "messages, 20 in the completion). Please reduce the length of the messages or completion.");
  e = ContextLengthError(200, std::nullopt, 110, "prompt");
  EXPECT_EQ(e.param, "prompt");
  EXPECT_EQ(e.message,
            "This model's maximum context length is 110 tokens. However, your request has 200 input tokens. "
            "Please reduce the length of the prompt.");
}

TEST(SseTest, Framing) {
  EXPECT_EQ(SseData(nlohmann::json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(SseDone(), "data: [DONE]\n\n");
  EXPECT_EQ(SseError(BadRequest("bad", "n")),
            "data: {\"error\":{\"code\":null,\"message\":\"bad\",\"param\":\"n\",\"type\":\"invalid_request_error\"}}\n\n");
  // Invalid UTF-8 is replaced, not thrown on.
  EXPECT_EQ(SseData(nlohmann::json{{"t", std::string("a\xff")}}), "data: {\"t\":\"a\xEF\xBF\xBD\"}\n\n");
}

}  // namespace
}  // namespace tessera::openai
