// A whole file as bytes, for the small text files the tools and loaders read
// (tokenizer files, key files, request bodies). Thread-safe. Cost: one read of
// the file; no size bound, so callers use it for files they chose to trust.
#pragma once

#include <string>

#include "common/status.h"

namespace tessera {

// NOT_FOUND "<path>: cannot open" when it cannot be opened.
StatusOr<std::string> ReadFileToString(const std::string& path);

}  // namespace tessera
