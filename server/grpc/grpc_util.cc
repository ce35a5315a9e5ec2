#include "server/grpc/grpc_util.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <random>
#include <string_view>

namespace tessera::grpc_api {

grpc::Status ToGrpc(const Status& status) {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (status.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kInvalidArgument: code = grpc::StatusCode::INVALID_ARGUMENT; break;
    case StatusCode::kNotFound: code = grpc::StatusCode::NOT_FOUND; break;
    case StatusCode::kOutOfRange: code = grpc::StatusCode::OUT_OF_RANGE; break;
    case StatusCode::kDataLoss: code = grpc::StatusCode::DATA_LOSS; break;
    case StatusCode::kUnimplemented: code = grpc::StatusCode::UNIMPLEMENTED; break;
    case StatusCode::kResourceExhausted: code = grpc::StatusCode::RESOURCE_EXHAUSTED; break;
    case StatusCode::kFailedPrecondition: code = grpc::StatusCode::FAILED_PRECONDITION; break;
    case StatusCode::kInternal: code = grpc::StatusCode::INTERNAL; break;
    case StatusCode::kUnavailable: code = grpc::StatusCode::UNAVAILABLE; break;
    case StatusCode::kDeadlineExceeded: code = grpc::StatusCode::DEADLINE_EXCEEDED; break;
    case StatusCode::kCancelled: code = grpc::StatusCode::CANCELLED; break;
  }
  return grpc::Status(code, status.message());
}

Status StatusFromApiError(const ApiError& error, const std::string& grpc_field) {
  std::string message = error.message;
  if (!error.param.empty() && message.find("'" + error.param + "'") == std::string::npos) {
    message += " (param '" + error.param + "')";
  }
  if (!grpc_field.empty() && grpc_field != error.param) message += " (gRPC field '" + grpc_field + "')";
  switch (error.status) {
    case ApiStatus::kBadRequest:
      if (error.code == "context_length_exceeded") return OutOfRange(std::move(message));
      if (error.code == "unsupported") return FailedPrecondition(std::move(message));
      return InvalidArgument(std::move(message));
    case ApiStatus::kPayloadTooLarge: return InvalidArgument(std::move(message));
    case ApiStatus::kNotFound: return Status(StatusCode::kNotFound, std::move(message));
    case ApiStatus::kTooManyRequests: return Status(StatusCode::kResourceExhausted, std::move(message));
    case ApiStatus::kServiceUnavailable: return Status(StatusCode::kUnavailable, std::move(message));
    case ApiStatus::kGatewayTimeout: return Status(StatusCode::kDeadlineExceeded, std::move(message));
    default: return Status(StatusCode::kInternal, std::move(message));
  }
}

std::string NewRequestId() {
  static const uint64_t salt = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
  static std::atomic<uint64_t> counter{0};
  char buf[48];
  std::snprintf(buf, sizeof(buf), "grpc-%016llx%08llx", static_cast<unsigned long long>(salt),
                static_cast<unsigned long long>(counter.fetch_add(1)));
  return buf;
}

int BearerKeyIndex(const std::string& authorization, const std::vector<std::string>& keys) {
  static constexpr std::string_view kPrefix = "Bearer ";
  if (authorization.size() < kPrefix.size() || authorization.compare(0, kPrefix.size(), kPrefix) != 0) return -1;
  const std::string_view given = std::string_view(authorization).substr(kPrefix.size());
  unsigned match = 0;
  unsigned index = 0;
  for (size_t k = 0; k < keys.size(); ++k) {
    const std::string& key = keys[k];
    // Touch every byte of the longer string so timing reveals no prefix match.
    const size_t n = std::max(given.size(), key.size());
    unsigned diff = given.size() == key.size() ? 0u : 1u;
    for (size_t i = 0; i < n; ++i) {
      const unsigned char a = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
      const unsigned char b = i < key.size() ? static_cast<unsigned char>(key[i]) : 0;
      diff |= static_cast<unsigned>(a ^ b);
    }
    const unsigned hit = (diff == 0 && !key.empty()) ? 1u : 0u;
    const unsigned mask = 0u - (hit & ~match);  // all ones for the first matching key only
    index |= static_cast<unsigned>(k) & mask;
    match |= hit;
  }
  return match != 0 ? static_cast<int>(index) : -1;
}

}  // namespace tessera::grpc_api
