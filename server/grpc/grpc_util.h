// What both gRPC front ends share, the instance's service (grpc_service.h)
// and the router's (server/router/router_grpc.h): the mapping of a Status and
// of an ApiError to a gRPC status, the bearer-key check and request ids.
// Knows nothing of serving or of the generated messages. Pure functions
// (NewRequestId: a process-wide counter); thread-safe.
#pragma once

#include <string>
#include <vector>

#include <grpcpp/support/status.h>

#include "common/status.h"
#include "server/openai/api_error.h"

namespace tessera::grpc_api {

// Tessera Status -> gRPC status (same message).
grpc::Status ToGrpc(const Status& status);

// The one mapping of an ApiError to a gRPC code, as a Status with the same
// message: 400 -> INVALID_ARGUMENT (OUT_OF_RANGE for context_length_exceeded,
// FAILED_PRECONDITION for "unsupported": no chat template), 413 ->
// INVALID_ARGUMENT, 404 -> NOT_FOUND, 429 -> RESOURCE_EXHAUSTED, 503 ->
// UNAVAILABLE, 504 -> DEADLINE_EXCEEDED, else INTERNAL. A message that does not
// quote its `param` gets " (param 'P')" appended, and " (gRPC field 'F')" when
// the proto's name for it differs (e.g. 'prompt' is 'token_ids').
Status StatusFromApiError(const ApiError& error, const std::string& grpc_field = "");

// A fresh request id, unique in this process ("grpc-<hex>").
std::string NewRequestId();

// Constant-time (in the compared bytes) check of "Bearer <key>" against keys:
// the index of the key it carries, -1 for none.
int BearerKeyIndex(const std::string& authorization, const std::vector<std::string>& keys);
inline bool CheckBearer(const std::string& authorization, const std::vector<std::string>& keys) {
  return BearerKeyIndex(authorization, keys) >= 0;
}

}  // namespace tessera::grpc_api
