// Bounded JSON parsing for request bodies. Linear in the body size whatever
// its shape: objects are built without the per-key lookup that makes
// nlohmann::ordered_json's own parser quadratic in the number of keys, and
// nesting, keys per object and total elements are capped, so a hostile body
// costs at most one pass over its bytes. Duplicate keys are refused (which
// value would win differs between JSON parsers). Thread-safe; never throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/openai/api_error.h"

namespace tessera::openai {

struct JsonLimits {
  int max_depth = 64;                     // nested arrays/objects
  int64_t max_object_keys = 2048;         // keys in any one object
  int64_t max_elements = int64_t{1} << 21;  // values in the whole document
};

// Parses `body` into `out` (key order kept). A malformed body, or one over a
// limit, is a 400 whose message names the limit; `out` is then unchanged.
std::optional<ApiError> ParseJsonBounded(std::string_view body, const JsonLimits& limits,
                                         nlohmann::ordered_json* out);

}  // namespace tessera::openai
