// libFuzzer target: arbitrary bytes as a regular expression (plain, and as a
// JSON Schema pattern inside a JSON string), compiled to a grammar and driven.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "structured/gbnf.h"
#include "structured/regex.h"
#include "tests/fuzz/structured_fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::structured;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const CompileLimits limits = fuzz::FuzzLimits();
  for (bool json : {false, true}) {
    auto expr = RegexToGbnf(text, limits, {.json_string = json, .search = json});
    if (!expr.ok()) continue;
    auto g = ParseGbnf("root ::= " + *expr + "\n", limits, std::chrono::steady_clock::now() + limits.max_compile_time);
    if (g.ok()) fuzz::Drive(*g, data, size);
  }
  return 0;
}
