// tokenizer.json post-processors for single sequences: TemplateProcessing,
// ByteLevel (a no-op on ids), Sequence. Reduced at load time to the ids that
// go before and after the sequence when special tokens are added.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "text/json_util.h"

namespace tessera::text {

struct SpecialTokenTemplate {
  std::vector<int32_t> prefix;  // ids before the sequence
  std::vector<int32_t> suffix;  // ids after it
};

// Folds the post_processor JSON into `out` (which starts empty).
Status ParsePostProcessor(const Json& j, const std::string& path, SpecialTokenTemplate* out);

}  // namespace tessera::text
