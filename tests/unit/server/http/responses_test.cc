// The one mapping of ApiStatus to HTTP status, and back for the router.
#include "server/http/responses.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(ResponsesTest, ApiStatusMapsToHttpAndBack) {
  EXPECT_EQ(ToHttpStatus(ApiStatus::kBadRequest), HttpStatus::bad_request);
  EXPECT_EQ(ToHttpStatus(ApiStatus::kNotFound), HttpStatus::not_found);
  EXPECT_EQ(ToHttpStatus(ApiStatus::kTooManyRequests), HttpStatus::too_many_requests);
  EXPECT_EQ(ToHttpStatus(ApiStatus::kInternal), HttpStatus::internal_server_error);
  for (ApiStatus s : {ApiStatus::kBadRequest, ApiStatus::kUnauthorized, ApiStatus::kNotFound,
                      ApiStatus::kMethodNotAllowed, ApiStatus::kPayloadTooLarge, ApiStatus::kUnsupportedMediaType,
                      ApiStatus::kTooManyRequests, ApiStatus::kHeaderFieldsTooLarge, ApiStatus::kInternal,
                      ApiStatus::kServiceUnavailable, ApiStatus::kGatewayTimeout}) {
    EXPECT_EQ(ApiStatusFromHttp(static_cast<int>(ToHttpStatus(s))), s);
  }
  EXPECT_EQ(ApiStatusFromHttp(502), ApiStatus::kInternal);  // an upstream status we never send
}

TEST(ResponsesTest, ErrorResponseIsTheOpenAiErrorObject) {
  ApiError e = BadRequest("'stop' bad", "stop");
  e.status = ApiStatus::kPayloadTooLarge;
  HttpResponse res = ErrorResponse(e);
  EXPECT_EQ(res.result(), HttpStatus::payload_too_large);
  EXPECT_EQ(nlohmann::json::parse(res.body()),
            nlohmann::json::parse(R"({"error":{"message":"'stop' bad","type":"invalid_request_error",)"
                                  R"("param":"stop","code":null}})"));
}

}  // namespace
}  // namespace tessera
