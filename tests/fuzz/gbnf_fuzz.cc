// libFuzzer target: arbitrary bytes as a GBNF grammar. Parsing and validation
// are bounded (CompileLimits); a grammar that compiles is driven for a few
// tokens, each mask checked against what the matcher then accepts.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "structured/gbnf.h"
#include "tests/fuzz/structured_fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::structured;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const CompileLimits limits = fuzz::FuzzLimits();
  auto g = ParseGbnf(text, limits, std::chrono::steady_clock::now() + limits.max_compile_time);
  if (g.ok()) fuzz::Drive(*g, data, size);
  return 0;
}
