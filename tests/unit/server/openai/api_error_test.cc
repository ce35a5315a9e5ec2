#include "server/openai/api_error.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(RetryAfterSecondsTest, FromTheMessageOfA429ElseTheDefaults) {
  EXPECT_EQ(RetryAfterSeconds(ErrorFromStatus(ResourceExhausted("queue too long; retry after 12 s"))), 12);
  EXPECT_EQ(RetryAfterSeconds(ErrorFromStatus(ResourceExhausted("at the limit of 4 requests in flight"))), 1);
  EXPECT_EQ(RetryAfterSeconds(ErrorFromStatus(ResourceExhausted("retry after x s"))), 1);
  EXPECT_EQ(RetryAfterSeconds(ErrorFromStatus(ResourceExhausted("retry after 0 s"))), 1);
  EXPECT_EQ(RetryAfterSeconds(ErrorFromStatus(Status(StatusCode::kUnavailable, "draining; retry after 9 s"))), 5);
  EXPECT_EQ(RetryAfterSeconds(ErrorFromStatus(InvalidArgument("'n' must be >= 1; retry after 3 s"))), 0);
}

}  // namespace
}  // namespace tessera
