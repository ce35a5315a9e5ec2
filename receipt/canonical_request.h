// The inverse of receipt::CanonicalRequest (receipt.h): a request as executed,
// read back from its canonical JSON, for `tessera replay` (docs/architecture.md,
// "Record and replay"). Everything that decides tokens is in the record except
// a structured-output constraint's grammar (named by its field only):
// `structured_output` is returned so the caller can rebuild it or refuse.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "scheduler/request.h"

namespace tessera::receipt {

struct ExecutedRequest {
  Request request;  // id empty; params.seed set to the seed used
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
  std::string structured_output;  // the constraint's field; "" : none
};

// INVALID_ARGUMENT naming the field for a missing key, a wrong type or a
// value out of its type's range. Its CanonicalRequest is the input again
// (tested), so its digest is the receipt's.
StatusOr<ExecutedRequest> ReadCanonicalRequest(const nlohmann::json& j);

}  // namespace tessera::receipt
