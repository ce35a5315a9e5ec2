// libFuzzer target: the parsers of tessera-bench's inputs (BurstGPT CSV traces,
// ShareGPT JSON, and the SSE byte stream a server sends). The first byte picks
// the parser. Accepted inputs must satisfy the documented invariants; rejected
// ones must carry an error prefixed with the input's name. The SSE stream is fed
// twice, whole and split at a fuzzer-chosen point: both must give the same events.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "bench/tessera_bench/dataset.h"
#include "bench/tessera_bench/sse.h"

namespace {

void CheckNamed(const tessera::Status& s) {
  if (s.message().find("fuzz") == std::string::npos) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 3;
  std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  int64_t skipped = 0;
  if (mode == 0) {
    auto rows = tessera::bench::ParseBurstGptCsv(in, "fuzz", &skipped);
    if (!rows.ok()) return CheckNamed(rows.status()), 0;
    for (const auto& r : *rows) {
      if (r.request_tokens <= 0 || r.response_tokens <= 0) __builtin_trap();
    }
  } else if (mode == 1) {
    auto convs = tessera::bench::ParseShareGpt(in, "fuzz", &skipped);
    if (!convs.ok()) return CheckNamed(convs.status()), 0;
    if (skipped < 0) __builtin_trap();
  } else {
    const size_t cut = in.empty() ? 0 : static_cast<uint8_t>(in[0]) % (in.size() + 1);
    tessera::bench::SseParser whole, split;
    auto a = whole.Feed(in);
    auto b = split.Feed(in.substr(0, cut));
    auto b2 = split.Feed(in.substr(cut));
    b.insert(b.end(), b2.begin(), b2.end());
    if (a.size() != b.size()) __builtin_trap();
    tessera::bench::StreamAccumulator acc;
    double now = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].data != b[i].data || a[i].event != b[i].event) __builtin_trap();
      acc.OnEvent(a[i], now += 0.001);
    }
    const auto& r = acc.result();
    if (r.content_chunks > 0 && (r.first_content < 0 || r.last_content < r.first_content)) __builtin_trap();
    if (r.content_chunks > 0 && static_cast<int64_t>(r.itl.size()) != r.content_chunks - 1) __builtin_trap();
  }
  return 0;
}
