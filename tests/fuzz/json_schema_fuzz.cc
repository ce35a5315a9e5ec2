// libFuzzer target: arbitrary bytes as a JSON Schema (when they parse as
// JSON), converted to GBNF, compiled and driven. Every failure must be a
// clean Status; the generated GBNF must always parse when conversion succeeds
// (else the converter emitted a broken grammar) unless a limit was hit.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "structured/gbnf.h"
#include "structured/json_schema.h"
#include "tests/fuzz/structured_fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera::structured;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto schema = nlohmann::ordered_json::parse(text, nullptr, false);
  if (schema.is_discarded()) return 0;
  const CompileLimits limits = fuzz::FuzzLimits();
  auto gbnf = JsonSchemaToGbnf(schema, limits);
  if (!gbnf.ok()) return 0;
  auto g = ParseGbnf(*gbnf, limits, std::chrono::steady_clock::now() + limits.max_compile_time);
  if (!g.ok()) {
    const std::string& m = g.status().message();
    const bool limit = m.find("too") != std::string::npos || m.find("unsatisfiable") != std::string::npos ||
                       m.find("repetition count") != std::string::npos;
    if (!limit) std::abort();  // the converter produced GBNF its own parser rejects
    return 0;
  }
  fuzz::Drive(*g, data, size);
  return 0;
}
