// libFuzzer target: --speculative-config parsing. Accepted configs satisfy
// the documented bounds; every rejection names the flag.
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/spec/spec_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto c = tessera::ParseSpeculativeConfig(text);
  if (!c.ok()) {
    if (c.status().message().rfind("--speculative-config: ", 0) != 0) __builtin_trap();
    return 0;
  }
  if (c->num_speculative_tokens < 1 || c->num_speculative_tokens > tessera::kMaxSpeculativeTokens) __builtin_trap();
  if (c->prompt_lookup_min < 1 || c->prompt_lookup_min > c->prompt_lookup_max) __builtin_trap();
  if (c->method == tessera::SpecMethod::kDraftModel && c->model.empty()) __builtin_trap();
  if (c->method == tessera::SpecMethod::kNgram && !c->model.empty()) __builtin_trap();
  if (c->max_verify_tokens < 2 || c->disable_by_batch_size < 0) __builtin_trap();
  return 0;
}
